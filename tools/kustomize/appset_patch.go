// An ApplicationSet's templatePatch, applied where Argo CD's ApplicationSet controller applies
// it (argo-cd v3.2.11, applicationset/controllers/template): after the template is rendered and
// the resources finalizer added, the patch string is rendered with the same parameters, read as
// JSON when it starts with `{` and as YAML otherwise, and merged into the Application with a
// strategic merge patch; the project is then put back as the template had it, so a patch cannot
// move an Application to another AppProject.
//
// How the merge is done here. Argo CD merges against its Application Go type. Under `spec`
// those types carry no patch strategy, so a strategic merge there is what a JSON merge patch
// (RFC 7386) does: maps merged key by key, lists replaced whole, null removes the key; this
// helper runs evanphx/json-patch's MergePatch on everything but `metadata`. `metadata` is
// ObjectMeta, whose lists do have strategies (finalizers merged as a set, ownerReferences by
// uid): it goes through apimachinery's strategic merge with ObjectMeta's own patch metadata.
// What Argo CD's typed round trip adds and this does not: it drops a field its types lack (kept
// here) and refuses a value of the wrong type (taken here). A strategic-merge directive
// (`$patch`, `$retainKeys`, `$setElementOrder/...`) outside metadata is refused, because a JSON
// merge would write it into the Application as a field.
//
// A job asks for it with a template of exactly one member, {"templatePatch": {"application":
// OBJECT, "patch": STRING, "goTemplate": BOOL}}. With goTemplate, the application (when the job
// has parameters) and the patch (always) are rendered here with the job's parameters; without
// it, the caller renders both (fasttemplate). The answer is the patched Application.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// patchJobKey is the one member of a job's template that asks for a templatePatch.
const patchJobKey = "templatePatch"

type patchJob struct {
	Application map[string]any `json:"application"`
	Patch       string         `json:"patch"`
	GoTemplate  bool           `json:"goTemplate"`
}

// asPatchJob is the templatePatch job a template asks for, or nil when it asks for none.
func asPatchJob(template any) (*patchJob, error) {
	m, ok := template.(map[string]any)
	if !ok || len(m) != 1 || m[patchJobKey] == nil {
		return nil, nil
	}
	raw, err := json.Marshal(m[patchJobKey])
	if err != nil {
		return nil, err
	}
	job := &patchJob{}
	if err := json.Unmarshal(raw, job); err != nil {
		return nil, fmt.Errorf("reading a templatePatch job: %w", err)
	}
	return job, nil
}

// patched is the job's Application, rendered (goTemplate) and then patched.
func (r renderer) patched(job *patchJob) (any, error) {
	var app any = job.Application
	patch := job.Patch
	if job.GoTemplate {
		var err error
		if len(r.params) > 0 {
			if app, err = r.walk(app); err != nil {
				return nil, err
			}
		}
		if patch, err = r.text(patch); err != nil {
			return nil, fmt.Errorf("error replacing values in templatePatch: %w", err)
		}
	}
	object, ok := app.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the rendered template is not an object")
	}
	return applyTemplatePatch(object, patch)
}

// applyTemplatePatch merges the rendered patch into the Application (see the file's comment).
func applyTemplatePatch(app map[string]any, rendered string) (map[string]any, error) {
	patchJSON := []byte(rendered)
	if trimmed := strings.TrimSpace(rendered); trimmed == "" || trimmed[0] != '{' {
		var err error
		if patchJSON, err = yaml.YAMLToJSON([]byte(rendered)); err != nil {
			return nil, fmt.Errorf("templatePatch is not YAML: %w", err)
		}
	}
	var patch map[string]json.RawMessage
	if err := json.Unmarshal(patchJSON, &patch); err != nil {
		return nil, fmt.Errorf("invalid templatePatch %q: not an object: %w", patchJSON, err)
	}
	out := map[string]any{}
	for key, value := range app {
		out[key] = value
	}
	for key, value := range patch {
		var merged any
		var err error
		if key == "metadata" {
			merged, err = mergeMetadata(out[key], value)
		} else {
			merged, err = mergeField(key, out[key], value)
		}
		if err != nil {
			return nil, err
		}
		if merged == nil {
			delete(out, key)
		} else {
			out[key] = merged
		}
	}
	keepProject(app, out)
	return out, nil
}

// mergeMetadata is the strategic merge of ObjectMeta: labels and annotations by key, finalizers
// as a set, ownerReferences by uid.
func mergeMetadata(original any, patch json.RawMessage) (any, error) {
	if original == nil {
		original = map[string]any{}
	}
	from, err := json.Marshal(original)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(from, patch, metav1.ObjectMeta{})
	if err != nil {
		return nil, fmt.Errorf("templatePatch cannot be applied to metadata: %w", err)
	}
	var out any
	return out, json.Unmarshal(merged, &out)
}

// mergeField is a JSON merge patch of one top-level field (spec, ...): what a strategic merge
// does on types without patch strategies.
func mergeField(key string, original any, patch json.RawMessage) (any, error) {
	var value any
	if err := json.Unmarshal(patch, &value); err != nil {
		return nil, err
	}
	if where := directive(value, key); where != "" {
		return nil, fmt.Errorf("templatePatch has the strategic-merge directive %s, which prune-gate does not apply outside metadata", where)
	}
	if value == nil {
		return nil, nil
	}
	from, err := json.Marshal(map[string]any{"v": original})
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(from, []byte(fmt.Sprintf(`{"v":%s}`, patch)))
	if err != nil {
		return nil, fmt.Errorf("templatePatch cannot be applied to %s: %w", key, err)
	}
	var out map[string]any
	if err := json.Unmarshal(merged, &out); err != nil {
		return nil, err
	}
	return out["v"], nil
}

// directive is the path of the first `$`-key in a patch value, or "".
func directive(value any, at string) string {
	switch v := value.(type) {
	case map[string]any:
		for key, inner := range v {
			if strings.HasPrefix(key, "$") {
				return at + "." + key
			}
			if found := directive(inner, at+"."+key); found != "" {
				return found
			}
		}
	case []any:
		for i, inner := range v {
			if found := directive(inner, fmt.Sprintf("%s[%d]", at, i)); found != "" {
				return found
			}
		}
	}
	return ""
}

// keepProject puts spec.project back as the rendered template had it.
func keepProject(app, out map[string]any) {
	before, _ := app["spec"].(map[string]any)
	after, ok := out["spec"].(map[string]any)
	if !ok {
		after = map[string]any{}
		out["spec"] = after
	}
	if project, found := before["project"]; found {
		after["project"] = project
	} else {
		delete(after, "project")
	}
}

// ApplicationSet templates with goTemplate, rendered as Argo CD's ApplicationSet controller
// renders them (argo-cd applicationset/utils Render): Go's text/template with sprig's generic
// functions (less env, expandenv and getHostByName) and Argo CD's own normalize, slugify, toYaml,
// fromYaml and fromYamlArray, the ApplicationSet's goTemplateOptions (missingkey=error...) set,
// applied to every string of the template, and to every map key, with the generator's parameters
// as data. A job whose template asks for a templatePatch is answered by appset_patch.go.
//
// usage: prune-gate-kustomize --appset-template < REQUEST
//
// REQUEST is one JSON object, {"options": [OPTION...], "jobs": [{"template": ANY, "params":
// OBJECT}...]}; the answer is {"results": [ANY...]} (one per job, in order), or exit 1 with the
// first job's error on stderr. Nothing is read or written but stdin and stdout.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/gosimple/slug"
	"sigs.k8s.io/yaml"
)

type appsetRequest struct {
	Options []string `json:"options"`
	Jobs    []struct {
		Template any            `json:"template"`
		Params   map[string]any `json:"params"`
	} `json:"jobs"`
}

var invalidDNSChars = regexp.MustCompile(`[^-a-z0-9.]`)

// normalize is Argo CD's SanitizeName: lower case, other characters as `-`, at most 253, trimmed.
func normalize(name string) string {
	name = invalidDNSChars.ReplaceAllString(strings.ToLower(name), "-")
	if len(name) > 253 {
		name = name[:253]
	}
	return strings.Trim(name, "-.")
}

// slugify is Argo CD's `slugify` template function: `slugify [LIMIT [SMART]] NAME`. The last
// argument is the name, normalized first; the slug is gosimple/slug's, at most LIMIT characters
// (50) and cut at a word boundary unless SMART is false. A value of another type panics, which
// text/template reports as the template's error, as Argo CD does.
func slugify(args ...any) string {
	if len(args) == 0 {
		return ""
	}
	limit, smart := 50, true
	if len(args) > 1 {
		limit = args[0].(int)
	}
	if len(args) > 2 {
		smart = args[1].(bool)
	}
	slug.MaxLength, slug.EnableSmartTruncate = limit, smart
	return slug.Make(normalize(args[len(args)-1].(string)))
}

func appsetFuncs() template.FuncMap {
	funcs := sprig.GenericFuncMap()
	for _, unsafe := range []string{"env", "expandenv", "getHostByName"} {
		delete(funcs, unsafe)
	}
	funcs["normalize"] = normalize
	funcs["slugify"] = slugify
	funcs["toYaml"] = func(v any) (string, error) {
		out, err := yaml.Marshal(v)
		return strings.TrimSuffix(string(out), "\n"), err
	}
	funcs["fromYaml"] = func(s string) (map[string]any, error) {
		m := map[string]any{}
		return m, yaml.Unmarshal([]byte(s), &m)
	}
	funcs["fromYamlArray"] = func(s string) ([]any, error) {
		a := []any{}
		return a, yaml.Unmarshal([]byte(s), &a)
	}
	return funcs
}

// renderAppsets answers one request read from in.
func renderAppsets(in io.Reader, out io.Writer) error {
	var req appsetRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	base := template.New("").Funcs(appsetFuncs())
	results := make([]any, 0, len(req.Jobs))
	for _, job := range req.Jobs {
		r := renderer{base: base, options: req.Options, params: job.Params}
		patch, err := asPatchJob(job.Template)
		if err != nil {
			return err
		}
		var done any
		if patch != nil {
			done, err = r.patched(patch)
		} else {
			done, err = r.walk(job.Template)
		}
		if err != nil {
			return err
		}
		results = append(results, done)
	}
	return json.NewEncoder(out).Encode(map[string]any{"results": results})
}

type renderer struct {
	base    *template.Template
	options []string
	params  map[string]any
}

func (r renderer) walk(v any) (any, error) {
	switch t := v.(type) {
	case string:
		return r.text(t)
	case []any:
		out := make([]any, len(t))
		for i, item := range t {
			done, err := r.walk(item)
			if err != nil {
				return nil, err
			}
			out[i] = done
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, item := range t {
			done, err := r.walk(item)
			if err != nil {
				return nil, err
			}
			key, err := r.text(k)
			if err != nil {
				return nil, err
			}
			out[key] = done
		}
		return out, nil
	default:
		return v, nil
	}
}

func (r renderer) text(s string) (out string, err error) {
	defer func() { // an unknown goTemplateOptions value panics in text/template
		if p := recover(); p != nil {
			err = fmt.Errorf("goTemplateOptions %v: %v", r.options, p)
		}
	}()
	t, err := r.base.Clone()
	if err == nil {
		t, err = t.Option(r.options...).Parse(s)
	}
	if err != nil {
		return "", fmt.Errorf("failed to parse template %s: %w", s, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, r.params); err != nil {
		return "", fmt.Errorf("failed to execute go template %s: %w", s, err)
	}
	return buf.String(), nil
}

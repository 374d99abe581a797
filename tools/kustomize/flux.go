package main

// What kustomize-controller does around kustomize's build, with Flux's own code: the generator
// before it (fluxGenerate, below), and the post-build after it.
//
// The post-build: kustomize-controller substitutes variables in each
// built object with github.com/fluxcd/pkg/kustomize's SubstituteVariables (the fluxcd/envsubst
// fork of drone/envsubst: `${var}`, `${var:=default}`, `${var/prod/stg}`, `${var:0:4}`,
// `${#var}`, `${var^^}`...), in strict mode (its StrictPostBuildSubstitutions feature gate, on
// by default since v1.9), skipping objects labelled or annotated
// `kustomize.toolkit.fluxcd.io/substitute: disabled`. This helper calls the same function at
// the version kustomize-controller v1.9.6 pins, so the names it renders are the names Flux
// applies.
//
// The caller (gate/sources/flux.py) resolves `substituteFrom` from the same revision: it sends
// the Kustomization's `spec.postBuild` with the ConfigMaps' and Secrets' data merged, in Flux's
// order, under `substitute` (so nothing is read from a cluster: there is none).

import (
	"context"
	"fmt"
	"strings"

	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resmap"
)

// fluxPostBuild is what a Flux Kustomization adds after the build.
type fluxPostBuild struct {
	// Namespace is the Kustomization's own namespace.
	Namespace string `json:"namespace"`
	// PostBuild is spec.postBuild, `substitute` holding every known variable; null when the
	// Kustomization has none (Flux then substitutes nothing).
	PostBuild map[string]any `json:"postBuild"`
	// Strict is the controller's StrictPostBuildSubstitutions (a variable referenced without a
	// default and not set fails the build).
	Strict bool `json:"strict"`
	// Unresolved says a substituteFrom source could not be read at this revision (a SOPS Secret,
	// a ConfigMap made elsewhere): its variables are unknown, so an object that references a
	// variable with no value is kept as written (its `${...}` text, the same identity on both
	// revisions) instead of failing or getting an empty name; the others are substituted.
	Unresolved bool `json:"unresolved"`
}

// substitute runs Flux's post-build substitution on every object of m, as kustomize-controller's
// build does.
func (f *fluxPostBuild) substitute(m resmap.ResMap) error {
	if f == nil || f.PostBuild == nil {
		return nil
	}
	k := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
		"kind":       "Kustomization",
		"metadata":   map[string]any{"namespace": f.Namespace, "name": "prune-gate"},
		"spec":       map[string]any{"postBuild": f.PostBuild},
	}}
	always := f.PostBuild["substituteStrategy"] == "Always"
	for _, res := range m.Resources() {
		out, err := fluxkustomize.SubstituteVariables(context.Background(), nil, k, res,
			fluxkustomize.SubstituteWithStrict(f.Strict || f.Unresolved),
			fluxkustomize.SubstituteWithAlways(always))
		if err != nil && f.Unresolved && strings.Contains(err.Error(), "variable not set") {
			continue // needs a value this revision does not hold: kept as written
		}
		if err != nil {
			return fmt.Errorf("post build failed for '%s/%s': %w", res.GetGvk(), res.GetName(), err)
		}
		if out != nil {
			if _, err := m.Replace(res); err != nil {
				return err
			}
		}
	}
	return nil
}

// fluxGenerate is what kustomize-controller does to a Kustomization's path before it builds it:
// github.com/fluxcd/pkg/kustomize's Generator writes the kustomization file the build reads,
// generated from every manifest below the path when there is none, and with the Kustomization's
// own build fields (targetNamespace, namePrefix, nameSuffix, patches, components, images...)
// merged in. Flux writes it into its copy of the source; this helper's file system is read-only,
// so the generated text is served in place of the file (confinedFS.generated) instead.
type fluxGenerate struct {
	// Root is the source's directory (Flux's working directory): the generator reads nothing
	// outside it.
	Root string `json:"root"`
	// Dir is the Kustomization's spec.path, inside Root.
	Dir string `json:"dir"`
	// Kustomization is the Flux Kustomization object as the repository declares it (only its
	// spec is read); {} for a path applied without one (generated as Flux generates it).
	Kustomization map[string]any `json:"kustomization"`
}

// generate returns the kustomization file Flux would build `g.Dir` from, its content, and
// whether it was made (the path had none: the generator read every manifest below it).
func (g *fluxGenerate) generate() (string, []byte, bool, error) {
	obj := unstructured.Unstructured{Object: g.Kustomization}
	if obj.Object == nil {
		obj.Object = map[string]any{}
	}
	manifest, kfile, action, err := fluxkustomize.NewGenerator(g.Root, obj).GenerateManifest(g.Dir)
	if err != nil {
		return "", nil, false, fmt.Errorf("failed to generate kustomization.yaml: %w", err)
	}
	return kfile, manifest, action == fluxkustomize.CreatedAction, nil
}

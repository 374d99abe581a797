package main

// Remote resources: a kustomization's `resources:` entry naming a URL (a CRD or a controller's
// install manifest, very often), or a generator's `files:` entry naming one (a Grafana dashboard
// from a release, as often), is not fetched here: the helper stays offline. Instead, as
// kustomize reads a kustomization file, each remote entry is either replaced by the local file
// the caller fetched it into (`--remote URL=FILE`, or "remote" in a --serve request: the gate
// fetches, over HTTPS, into its content cache) or left out of the build, and reported on stderr
// as a line `prune-gate-kustomize: remote not fetched: FILE: URL`, so the caller can say that
// the build holds everything but that content (and compare the URLs of two revisions).

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// remoteNotFetched starts the stderr line naming a remote entry left out of a build.
const remoteNotFetched = "prune-gate-kustomize: remote not fetched: "

// remotes is one build's remote entries: the fetched files by URL, and those left out.
type remotes struct {
	fetched map[string]string // URL -> absolute path of its fetched content
	allowed map[string]bool   // the fetched files, readable though outside the roots
	skipped map[string]bool   // "FILE: URL" lines
	// drop is the "Kind/name" targets a patch may not reach in a kustomization that had remote
	// entries left out (the target is the remote content); dropped the "FILE: Kind/name" lines.
	drop    map[string]bool
	dropped map[string]bool
	read    func(string) ([]byte, error) // the confined file system's: a patch file is read through it
}

// patchLeftOut starts the stderr line naming a patch left out with the remote content.
const patchLeftOut = "prune-gate-kustomize: patch left out (its target is in remote content not fetched): "

// missingTarget reads the Id of kustomize's "no matches for Id Kind.v.[grp]/name.[ns]" and
// "failed to find unique target for patch Kind.v.[grp]/name.[ns]" errors.
var missingTarget = regexp.MustCompile(`(?:no matches for Id|unique target for patch) (\w+)\.\S*?/(\S+?)\.(?:\[noNs\]|[a-z0-9-]+)(?:;|\s|$)`)

// leaveOutPatchOn says, after a failed build, whether to build again without the patches on
// the target the error names: only when remote entries were left out, once per target.
func (r *remotes) leaveOutPatchOn(err error) bool {
	if len(r.skipped) == 0 {
		return false
	}
	m := missingTarget.FindStringSubmatch(err.Error())
	if m == nil || r.drop[m[1]+"/"+m[2]] {
		return false
	}
	r.drop[m[1]+"/"+m[2]] = true
	return true
}

// patchTargets is the "Kind/name" a patches or patchesStrategicMerge entry names: its target
// selector's, and its patch document's (inline, or the file at its path).
func patchTargets(read func(string) ([]byte, error), dir string, item any) []string {
	var doc string
	var out []string
	switch v := item.(type) {
	case string:
		doc = v
	case map[string]any:
		if t, ok := v["target"].(map[string]any); ok {
			k, _ := t["kind"].(string)
			n, _ := t["name"].(string)
			out = append(out, k+"/"+n)
		}
		if p, ok := v["patch"].(string); ok {
			doc = p
		} else if p, ok := v["path"].(string); ok {
			doc = p
		}
	}
	if doc != "" && !strings.Contains(doc, "\n") {
		if data, err := read(filepath.Join(dir, doc)); err == nil {
			doc = string(data)
		}
	}
	for _, part := range strings.Split(doc, "\n---") {
		var d struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal([]byte(part), &d) == nil && d.Kind != "" {
			out = append(out, d.Kind+"/"+d.Metadata.Name)
		}
	}
	return out
}

func newRemotes(fetched map[string]string) (*remotes, error) {
	r := &remotes{fetched: map[string]string{}, allowed: map[string]bool{}, skipped: map[string]bool{},
		drop: map[string]bool{}, dropped: map[string]bool{}}
	for url, file := range fetched {
		abs, err := filepath.Abs(file)
		if err != nil {
			return nil, err
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("fetched content of %s: %w", url, err)
		}
		r.fetched[url] = real
		r.allowed[real] = true
	}
	return r, nil
}

// isKustomizationFile says whether kustomize reads `path` as a kustomization.
func isKustomizationFile(path string) bool {
	switch filepath.Base(path) {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// rewrite returns the kustomization file `path` with each remote entry of resources, bases and
// components replaced by its fetched file, or left out and recorded. A file that is not YAML,
// or has no remote entry, is returned as it is (kustomize reports its errors itself).
func (r *remotes) rewrite(path string, data []byte) []byte {
	var k map[string]any
	if yaml.Unmarshal(data, &k) != nil || k == nil {
		return data
	}
	changed, left := false, false
	for _, field := range []string{"resources", "bases", "components"} {
		list, ok := k[field].([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, item := range list {
			entry, ok := item.(string)
			if !ok || !isRemote(entry) {
				kept = append(kept, item)
				continue
			}
			changed = true
			if file, ok := r.fetched[entry]; ok && field == "resources" {
				kept = append(kept, file)
				continue
			}
			r.skipped[path+": "+entry] = true
			left = true
		}
		k[field] = kept
	}
	for _, field := range []string{"configMapGenerator", "secretGenerator"} {
		if gens, ok := k[field].([]any); ok {
			for _, gen := range gens {
				if g, ok := gen.(map[string]any); ok && r.rewriteFiles(path, g) {
					changed = true
				}
			}
		}
	}
	// A patch on a target kustomize found nowhere, in a build that left remote content out, is
	// left out with it: in this kustomization, or in one that builds it (a parent patching
	// what a child's remote base holds). The targets to drop are only those a failed build
	// named (leaveOutPatchOn), and each drop is reported.
	for _, field := range []string{"patches", "patchesStrategicMerge"} {
		list, ok := k[field].([]any)
		if !ok || (!left && len(r.skipped) == 0) || len(r.drop) == 0 {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, item := range list {
			hit := ""
			for _, t := range patchTargets(r.read, filepath.Dir(path), item) {
				if r.drop[t] {
					hit = t
				}
			}
			if hit == "" {
				kept = append(kept, item)
				continue
			}
			changed = true
			r.dropped[path+": "+hit] = true
		}
		k[field] = kept
	}
	if !changed {
		return data
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return data
	}
	return out
}

// rewriteFiles replaces each remote `files:` entry of one generator (`[KEY=]URL`) by its fetched
// file under the same key (kustomize's default key is the URL's last path element), or leaves it
// out and records it: the object is generated from the rest of its data, the same on two
// revisions that name the same URL. It says whether anything changed.
func (r *remotes) rewriteFiles(path string, gen map[string]any) bool {
	files, ok := gen["files"].([]any)
	if !ok {
		return false
	}
	changed := false
	kept := make([]any, 0, len(files))
	for _, item := range files {
		entry, ok := item.(string)
		key, src := "", entry
		if i := strings.Index(entry, "="); ok && i > 0 && isRemote(entry[i+1:]) && !isRemote(entry[:i]) {
			key, src = entry[:i], entry[i+1:]
		}
		if !ok || !isRemote(src) {
			kept = append(kept, item)
			continue
		}
		changed = true
		if file, ok := r.fetched[src]; ok {
			if key == "" {
				key = urlBase(src)
			}
			kept = append(kept, key+"="+file)
			continue
		}
		r.skipped[path+": "+src] = true
	}
	gen["files"] = kept
	return changed
}

// urlBase is the last element of a URL's path, as kustomize names a file source's key.
func urlBase(url string) string {
	url = strings.SplitN(strings.SplitN(url, "?", 2)[0], "#", 2)[0]
	return url[strings.LastIndex(url, "/")+1:]
}

// report is the stderr lines naming the entries left out, sorted.
func (r *remotes) report() string {
	lines := make([]string, 0, len(r.skipped))
	for s := range r.skipped {
		lines = append(lines, remoteNotFetched+s+"\n")
	}
	for s := range r.dropped {
		lines = append(lines, patchLeftOut+s+"\n")
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}

// parseRemote reads a --remote URL=FILE argument.
func parseRemote(arg string, into map[string]string) error {
	i := strings.LastIndex(arg, "=")
	if i <= 0 || i == len(arg)-1 {
		return fmt.Errorf("--remote takes URL=FILE, not %q", arg)
	}
	into[arg[:i]] = arg[i+1:]
	return nil
}

package main

// What a build read, for the caller's build cache: a build whose every read is the same at
// another revision builds to the same objects there, so the caller can reuse it without building
// (gate/sources/buildcache.py). Each read is named by its kind and the absolute path asked for
// (not the path it resolves to: the caller refuses to reuse a build that read through a symlink,
// whose target may change while the link does not):
//
//	file: the file's content (ReadFile, Open; a missing file is read as missing)
//	stat: whether the path exists and is a directory (Exists, IsDir, CleanedAbs)
//	list: the names in a directory (ReadDir)
//	tree: everything below a directory (Walk, Glob)
//
// Flux's generator reads through a file system of its own, so its reads are named here from
// what it does (kustomize_generator.go of github.com/fluxcd/pkg/kustomize): the recognised
// kustomization files of the path, its scan of the manifests below when there is none
// (noteScan), and whether each component exists.

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
)

// readKind is what a build depended on at a path.
type readKind string

const (
	readFile readKind = "file"
	readStat readKind = "stat"
	readList readKind = "list"
	readTree readKind = "tree"
)

// reads is one build's set of reads, when the caller asked for them (nil: not traced).
type reads map[[2]string]bool

// note records that the build read `path` as `kind`.
func (r reads) note(kind readKind, path string) {
	if r == nil {
		return
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	r[[2]string{string(kind), path}] = true
}

// sorted is the reads as [kind, path] pairs, in a stable order.
func (r reads) sorted() [][2]string {
	if r == nil {
		return nil
	}
	out := make([][2]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][1] != out[j][1] {
			return out[i][1] < out[j][1]
		}
		return out[i][0] < out[j][0]
	})
	return out
}

// noteGenerator records what Flux's generator reads of gen.Dir: the kustomization files it
// looks for; with none, every file below (it scans them all); each component's existence.
func (r reads) noteGenerator(gen *fluxGenerate, created bool) {
	if r == nil {
		return
	}
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		r.note(readFile, filepath.Join(gen.Dir, name))
	}
	if created {
		r.noteScan(gen.Dir)
	}
	if spec, ok := gen.Kustomization["spec"].(map[string]any); ok {
		if components, ok := spec["components"].([]any); ok {
			for _, c := range components {
				if s, ok := c.(string); ok {
					r.note(readStat, filepath.Join(gen.Dir, s))
				}
			}
		}
	}
}

// noteScan records what the generator's scan of `dir` reads when the path has no kustomization
// file (scanManifests in kustomize_generator.go): every directory's listing, whether each
// directory below holds a kustomization file (it stops there: the directory is a resource, built
// by kustomize, whose reads are traced), and every YAML file it decodes. A directory it cannot
// walk is recorded whole.
func (r reads) noteScan(dir string) {
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			r.note(readTree, path)
			return nil
		}
		if !info.IsDir() {
			if ext := filepath.Ext(path); ext == ".yaml" || ext == ".yml" {
				r.note(readFile, path)
			}
			return nil
		}
		r.note(readList, path)
		if path == dir {
			return nil
		}
		for _, name := range konfig.RecognizedKustomizationFileNames() {
			kpath := filepath.Join(path, name)
			r.note(readStat, kpath)
			if st, err := os.Stat(kpath); err == nil && !st.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

// globDir is the directory a glob pattern lists: its longest leading part without a pattern
// character.
func globDir(pattern string) string {
	cut := strings.IndexAny(pattern, "*?[\\")
	if cut < 0 {
		return filepath.Dir(pattern)
	}
	return filepath.Dir(pattern[:cut+1])
}

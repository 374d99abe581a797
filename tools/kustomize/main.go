// Command prune-gate-kustomize builds a kustomization with kustomize's own API (krusty), on a
// file system that reads nothing outside the roots it is given.
//
// `kubectl kustomize --load-restrictor=LoadRestrictionsNone` reads any file the runner can: a
// candidate's `configMapGenerator: [{envs: [/proc/self/environ]}]` puts the CI runner's secrets
// into the rendered objects. Flux builds the same way but on a file system rooted at the
// repository; this helper does the same: any file may be named (LoadRestrictionsNone, as Flux),
// as long as it resolves, symlinks followed, inside a root. Remote bases and files are refused
// (rendering is offline and must not depend on, or talk to, the network): a remote entry of a
// kustomization is built from the file the caller fetched it into (--remote URL=FILE), else left
// out and named on stderr (remote.go), and nothing is written.
//
// usage: prune-gate-kustomize --root DIR [--root DIR...] [--remote URL=FILE...] KUSTOMIZATION_DIR
//
//	prune-gate-kustomize --serve
//	prune-gate-kustomize --appset-template   (appset.go)
//
// Exit codes: 0 built (YAML on stdout), 1 the build failed or was refused (message on stderr),
// 2 usage error.
//
// With --serve it builds one kustomization per request: a JSON line on stdin,
// {"roots": [DIR...], "target": DIR, "generate": GENERATE, "flux": POSTBUILD, "remote": {URL: FILE},
// "trace": BOOL}, answered by a JSON line on stdout, {"code": 0|1|2, "stdout": YAML, "stderr":
// message, "reads": [[KIND, PATH]...]}, the exit code and output the one-build form would have
// given, and with "trace" what the build read (trace.go); it says {"serve": 3} first (2 was a
// helper without "trace", 1 one without "generate"), and ends at the end of its input. A repository with many
// Flux Kustomizations then pays kustomize's start once: a build with patches parses the
// embedded Kubernetes OpenAPI schema, 0.2 s each time. The optional members are what Flux's
// kustomize-controller does around kustomize's build of a Kustomization's path, each with Flux's
// own code (flux.go): "generate", the kustomization file it generates or amends before the
// build (its targetNamespace, patches, components...); "flux", the post-build substitution of
// the built objects.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
)

type rootList []string

func (r *rootList) String() string { return strings.Join(*r, ",") }

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--appset-template" {
		offline()
		if err := renderAppsets(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "--serve" {
		offline()
		answers, err := answersAside()
		if err == nil {
			err = serve(os.Stdin, answers)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "prune-gate-kustomize: %v\n", err)
			os.Exit(2)
		}
		return
	}
	fetched := map[string]string{}
	roots, target, err := parseArgs(os.Args[1:], fetched)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prune-gate-kustomize: %v\n", err)
		fmt.Fprintln(os.Stderr, "usage: prune-gate-kustomize --root DIR [--root DIR...] KUSTOMIZATION_DIR")
		fmt.Fprintln(os.Stderr, "       prune-gate-kustomize --serve")
		os.Exit(2)
	}
	offline()
	r := build(roots, target, nil, nil, fetched, false)
	fmt.Fprint(os.Stderr, r.Stderr)
	if r.Code != 0 {
		os.Exit(r.Code)
	}
	if _, err := os.Stdout.Write([]byte(r.Stdout)); err != nil {
		os.Exit(1)
	}
}

// result is one build's exit code and output.
type result struct {
	Code   int    `json:"code"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Reads is what the build read (trace.go), when the request asked for it.
	Reads [][2]string `json:"reads,omitempty"`
}

// build builds `target` on a file system confined to `roots`, with the remote entries in
// `fetched` read from their fetched files: when `gen` is not nil, with the kustomization file
// Flux generates for its directory; then runs a Flux Kustomization's post-build on it when `flux`
// is not nil.
//
// With `trace`, the result names what the build read (trace.go), also when it failed: how far a
// build gets before it fails depends on what it read as much as its success does.
func build(roots []string, target string, gen *fluxGenerate, flux *fluxPostBuild, fetched map[string]string, trace bool) (r result) {
	fs, err := newConfinedFS(roots)
	if trace && fs != nil {
		fs.reads = reads{}
		defer func() { r.Reads = fs.reads.sorted() }()
	}
	if err == nil {
		fs.remote, err = newRemotes(fetched)
	}
	if err == nil {
		fs.remote.read = fs.ReadFile
	}
	if err != nil {
		return result{Code: 2, Stderr: fmt.Sprintf("prune-gate-kustomize: %v\n", err)}
	}
	if gen != nil {
		if err := fs.serveGenerated(gen); err != nil {
			return result{Code: 1, Stderr: fmt.Sprintf("%v\n", err)}
		}
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone // the file system confines, as Flux's does
	resMap, err := krusty.MakeKustomizer(opts).Run(fs, target)
	// A patch whose target only the remote content left out held cannot apply: leave it out
	// too (bounded), and say so.
	for try := 0; err != nil && try < 8 && fs.remote.leaveOutPatchOn(err); try++ {
		resMap, err = krusty.MakeKustomizer(opts).Run(fs, target)
	}
	if err != nil {
		// The remote entries left out come first: a patch whose target only they held fails
		// here, and the caller says so.
		return result{Code: 1, Stderr: fs.remote.report() + fmt.Sprintf("%v\n", err)}
	}
	if err := flux.substitute(resMap); err != nil {
		return result{Code: 1, Stderr: fmt.Sprintf("%v\n", err)}
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return result{Code: 1, Stderr: fmt.Sprintf("%v\n", err)}
	}
	return result{Stdout: string(out), Stderr: fs.remote.report()}
}

// serve answers build requests until its input ends (see the package comment).
//
// Builds share the process, so nothing one build sets may reach the next: kustomize keeps its
// OpenAPI schema in a global, which a kustomization's `openapi:` field (its own or a nested
// one's) replaces, so after any build that left it other than the built-in default it is reset
// (the next build parses the default again). A panic in a build is that build's error, and
// the last answer: the process ends after it, with nothing of the panic kept for a next build.
func serve(in io.Reader, out io.Writer) error {
	requests := bufio.NewReader(in)
	answers := bufio.NewWriter(out)
	defaultSchema := openapi.GetSchemaVersion()
	if err := answer(answers, map[string]int{"serve": 3}); err != nil {
		return err
	}
	for {
		line, err := requests.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var req struct {
			Roots    []string          `json:"roots"`
			Target   string            `json:"target"`
			Generate *fluxGenerate     `json:"generate"`
			Flux     *fluxPostBuild    `json:"flux"`
			Remote   map[string]string `json:"remote"`
			Trace    bool              `json:"trace"`
		}
		var r result
		panicked := false
		if jerr := json.Unmarshal(line, &req); jerr != nil || len(req.Roots) == 0 || req.Target == "" {
			r = result{Code: 2, Stderr: fmt.Sprintf("prune-gate-kustomize: a request is {\"roots\": [DIR...], \"target\": DIR}, not %q\n", line)}
		} else {
			r, panicked = buildRecovering(req.Roots, req.Target, req.Generate, req.Flux, req.Remote, req.Trace)
		}
		if openapi.GetSchemaVersion() != defaultSchema {
			openapi.ResetOpenAPI()
		}
		if err := answer(answers, r); err != nil || panicked {
			return err
		}
	}
}

// answersAside keeps the process's stdout for the answers alone, on a descriptor of its own, and
// points descriptor 1 (so os.Stdout too, which stays the one File for it: a File dropped would
// close it when collected) at stderr: nothing a build writes can then be read as an answer.
func answersAside() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, err
	}
	if err := unix.Dup2(2, 1); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "answers"), nil
}

// buildRecovering is build, with a panic in kustomize made that build's error.
func buildRecovering(roots []string, target string, gen *fluxGenerate, flux *fluxPostBuild, fetched map[string]string, trace bool) (r result, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			r, panicked = result{Code: 1, Stderr: fmt.Sprintf("kustomize failed: %v\n", p)}, true
		}
	}()
	return build(roots, target, gen, flux, fetched, trace), false
}

func answer(w *bufio.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		return err
	}
	return w.Flush()
}

func parseArgs(args []string, fetched map[string]string) ([]string, string, error) {
	var roots rootList
	var target string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--root":
			if i+1 >= len(args) {
				return nil, "", errors.New("--root needs a directory")
			}
			i++
			roots = append(roots, args[i])
		case strings.HasPrefix(a, "--root="):
			roots = append(roots, strings.TrimPrefix(a, "--root="))
		case a == "--remote" && i+1 < len(args):
			i++
			if err := parseRemote(args[i], fetched); err != nil {
				return nil, "", err
			}
		case strings.HasPrefix(a, "-"):
			return nil, "", fmt.Errorf("unknown option %s", a)
		case target != "":
			return nil, "", errors.New("exactly one kustomization directory")
		default:
			target = a
		}
	}
	if len(roots) == 0 || target == "" {
		return nil, "", errors.New("a --root and a kustomization directory are required")
	}
	return roots, target, nil
}

// offline makes every way kustomize could reach the network fail: remote files go through
// net/http's default transport, remote bases through `git` found on PATH.
func offline() {
	http.DefaultTransport = refuseTransport{}
	_ = os.Setenv("PATH", "")
	_ = os.Setenv("GIT_ALLOW_PROTOCOL", "none")
}

type refuseTransport struct{}

func (refuseTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("refusing to fetch %s: remote resources are not rendered (offline build); vendor the file into the repository", r.URL.Redacted())
}

// confinedFS is kustomize's on-disk file system restricted to reads below its roots; every path
// is resolved (symlinks followed) before the check, so a link cannot lead outside.
type confinedFS struct {
	disk   filesys.FileSystem
	roots  []string
	remote *remotes // remote entries: fetched files, those left out (remote.go)
	// generated maps a kustomization file's real path to the text Flux generated for it
	// (fluxGenerate), read in place of the file, which may not exist on disk.
	generated map[string][]byte
	reads     reads // what the build read, when traced (trace.go)
}

// serveGenerated has Flux's generator make the kustomization file of gen.Dir, and serves it in
// place of the file on disk. The directory must be inside a root: the generator reads it
// through Flux's own confined file system, rooted at gen.Root.
func (c *confinedFS) serveGenerated(gen *fluxGenerate) error {
	if _, err := c.resolve(gen.Root); err != nil {
		return err
	}
	kfile, manifest, created, err := gen.generate()
	if err != nil {
		return err
	}
	c.reads.noteGenerator(gen, created)
	real, err := c.resolve(kfile)
	if err != nil {
		return err
	}
	c.generated = map[string][]byte{real: manifest}
	return nil
}

func newConfinedFS(roots []string) (*confinedFS, error) {
	fs := &confinedFS{disk: filesys.MakeFsOnDisk()}
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, err
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", r, err)
		}
		fs.roots = append(fs.roots, real)
	}
	return fs, nil
}

// resolve returns the real path of `path` (symlinks followed; a missing tail kept as written)
// or an error naming the path when it lies outside every root.
func (c *confinedFS) resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	real, err := evalExisting(abs)
	if err != nil {
		return "", err
	}
	if c.remote != nil && c.remote.allowed[real] {
		return real, nil // content the caller fetched for a remote entry
	}
	for _, root := range c.roots {
		if real == root || strings.HasPrefix(real, root+string(filepath.Separator)) {
			return real, nil
		}
	}
	if real != abs {
		return "", fmt.Errorf("refusing to read %s (it resolves to %s): outside the revision's tree; a kustomization may only name files in the repository", path, real)
	}
	return "", fmt.Errorf("refusing to read %s: outside the revision's tree; a kustomization may only name files in the repository", path)
}

// evalExisting resolves symlinks in the longest existing prefix of `abs`.
func evalExisting(abs string) (string, error) {
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return abs, nil
	}
	base, err := evalExisting(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(base, filepath.Base(abs)), nil
}

var errReadOnly = errors.New("refusing to write: rendering is read-only")

func (c *confinedFS) Create(string) (filesys.File, error) { return nil, errReadOnly }
func (c *confinedFS) Mkdir(string) error                  { return errReadOnly }
func (c *confinedFS) MkdirAll(string) error               { return errReadOnly }
func (c *confinedFS) RemoveAll(string) error              { return errReadOnly }
func (c *confinedFS) WriteFile(string, []byte) error      { return errReadOnly }

func (c *confinedFS) Open(path string) (filesys.File, error) {
	c.reads.note(readFile, path)
	real, err := c.resolve(path)
	if err != nil {
		return nil, err
	}
	if _, ok := c.generated[real]; ok {
		return nil, errors.New("refusing to open a generated kustomization file: it is only read whole")
	}
	return c.disk.Open(real)
}

func (c *confinedFS) IsDir(path string) bool {
	c.reads.note(readStat, path)
	real, err := c.resolve(path)
	return err == nil && c.disk.IsDir(real)
}

func (c *confinedFS) Exists(path string) bool {
	c.reads.note(readStat, path)
	real, err := c.resolve(path)
	if err != nil {
		return false
	}
	_, generated := c.generated[real]
	return generated || c.disk.Exists(real)
}

func (c *confinedFS) ReadDir(path string) ([]string, error) {
	c.reads.note(readList, path)
	real, err := c.resolve(path)
	if err != nil {
		return nil, err
	}
	return c.disk.ReadDir(real)
}

func (c *confinedFS) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	c.reads.note(readStat, path)
	if _, err := c.resolve(path); err != nil {
		return "", "", err
	}
	return c.disk.CleanedAbs(path)
}

func (c *confinedFS) Glob(pattern string) ([]string, error) {
	c.reads.note(readTree, globDir(pattern))
	matches, err := c.disk.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var inside []string
	for _, m := range matches {
		if _, err := c.resolve(m); err == nil {
			inside = append(inside, m)
		}
	}
	return inside, nil
}

func (c *confinedFS) Walk(path string, walkFn filepath.WalkFunc) error {
	c.reads.note(readTree, path)
	if _, err := c.resolve(path); err != nil {
		return err
	}
	return c.disk.Walk(path, walkFn)
}

func (c *confinedFS) ReadFile(path string) ([]byte, error) {
	c.reads.note(readFile, path)
	real, err := c.resolve(path)
	if err != nil {
		return nil, err
	}
	data, generated := c.generated[real]
	if !generated {
		data, err = c.disk.ReadFile(real)
	}
	if err == nil && c.remote != nil && isKustomizationFile(real) {
		data = c.remote.rewrite(path, data)
	}
	return data, err
}

// isRemote says whether a kustomization entry names content elsewhere than the tree.
func isRemote(entry string) bool {
	lower := strings.ToLower(entry)
	if strings.Contains(lower, "://") || strings.HasPrefix(lower, "git@") || strings.Contains(lower, "?ref=") {
		return true
	}
	for _, host := range []string{"github.com/", "gitlab.com/", "bitbucket.org/", "dev.azure.com/"} {
		if strings.HasPrefix(lower, host) {
			return true
		}
	}
	return false
}

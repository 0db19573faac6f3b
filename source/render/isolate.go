package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/plumb-dev/plumb/source/manifest"
	"github.com/plumb-dev/plumb/source/tree"
)

// Isolation runs Kustomize and Helm builds in a child process that can be
// stopped: neither can be interrupted in-process, and a hostile chart (a
// template that loops a billion times) or kustomization would otherwise
// hold a worker and the controller's memory for as long as it likes. The
// child gets the files of the build on stdin, nothing else — no
// environment, no credentials, an empty working folder — renders them with
// the same code, and answers on stdout. It is killed at Timeout, and its
// memory (RLIMIT_DATA: what it maps to write, its heap) is capped at
// MemoryBytes. (RLIMIT_AS would not do: the Go runtime reserves address
// space it never uses, and a child capped that way fails at random.)
type Isolation struct {
	// Command starts the child: a program that calls ServeIsolated (plumb's
	// hidden `render-sandbox` command, or a test binary).
	Command []string
	// Env is the child's whole environment (e.g. a marker for a test
	// binary); nothing of the parent's is passed on.
	Env []string
	// Timeout bounds one build (default 30s).
	Timeout time.Duration
	// MemoryBytes caps the child's data memory (default 2 GiB).
	MemoryBytes uint64
}

// memoryEnv tells the child its address-space cap.
const memoryEnv = "PLUMB_RENDER_MEMORY_BYTES"

// job is what the child renders.
type job struct {
	Engine Engine            `json:"engine"`
	Dir    string            `json:"dir"`
	Files  map[string][]byte `json:"files"`
	Helm   HelmOptions       `json:"helm"`
}

// answer is what the child renders to.
type answer struct {
	Objects []wireObject `json:"objects,omitempty"`
	Error   *wireError   `json:"error,omitempty"`
}

type wireObject struct {
	File   string         `json:"file"`
	Line   int            `json:"line"`
	Object map[string]any `json:"object"`
}

// wireError carries an error across the process boundary with what
// errors.Is and errors.As need on the other side.
type wireError struct {
	Message string `json:"message"`
	// Render is set for a Kustomize or Helm failure (*Error).
	Render *struct {
		Engine Engine `json:"engine"`
		Path   string `json:"path"`
		Cause  string `json:"cause"`
	} `json:"render,omitempty"`
	Manifest *manifest.Error  `json:"manifest,omitempty"`
	Limit    *tree.LimitError `json:"limit,omitempty"`
	// Sentinels are the sentinel errors the chain holds, by name.
	Sentinels []string `json:"sentinels,omitempty"`
}

var sentinels = map[string]error{
	"not-in-repository": ErrNotInRepository,
	"path-not-found":    ErrPathNotFound,
	"escapes-root":      tree.ErrEscapesRoot,
	"not-exist":         tree.ErrNotExist,
}

func toWire(err error) *wireError {
	w := &wireError{Message: err.Error()}
	var renderErr *Error
	if errors.As(err, &renderErr) {
		w.Render = &struct {
			Engine Engine `json:"engine"`
			Path   string `json:"path"`
			Cause  string `json:"cause"`
		}{renderErr.Engine, renderErr.Path, renderErr.Err.Error()}
	}
	var manifestErr *manifest.Error
	if errors.As(err, &manifestErr) {
		w.Manifest = manifestErr
	}
	var limitErr *tree.LimitError
	if errors.As(err, &limitErr) {
		w.Limit = limitErr
	}
	for name, sentinel := range sentinels {
		if errors.Is(err, sentinel) {
			w.Sentinels = append(w.Sentinels, name)
		}
	}
	return w
}

// isolatedError is an error from the child: its message, and what it was.
type isolatedError struct {
	msg   string
	chain []error
}

func (e *isolatedError) Error() string   { return e.msg }
func (e *isolatedError) Unwrap() []error { return e.chain }

func (w *wireError) err() error {
	e := &isolatedError{msg: w.Message}
	if w.Render != nil {
		e.chain = append(e.chain, &Error{Engine: w.Render.Engine, Path: w.Render.Path, Err: errors.New(w.Render.Cause)})
	}
	if w.Manifest != nil {
		e.chain = append(e.chain, w.Manifest)
	}
	if w.Limit != nil {
		e.chain = append(e.chain, w.Limit)
	}
	for _, name := range w.Sentinels {
		if s, ok := sentinels[name]; ok {
			e.chain = append(e.chain, s)
		}
	}
	return e
}

// isolated renders a Kustomize or Helm build in a child process.
func (iso *Isolation) render(ctx context.Context, t *tree.Tree, engine Engine, dir string, helm HelmOptions) ([]manifest.Object, error) {
	j := job{Engine: engine, Dir: dir, Helm: helm, Files: map[string][]byte{}}
	root := dir
	if engine == Kustomize {
		root = "" // bases may lie anywhere in the repository
	}
	files, err := t.Files(root)
	if err != nil {
		return nil, err
	}
	if engine == Helm {
		files = append(files, helm.ValuesFiles...)
	}
	for i, file := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := t.ReadFile(file)
		if err != nil {
			if i >= len(files)-len(helm.ValuesFiles) && engine == Helm && errors.Is(err, tree.ErrNotExist) {
				continue // a missing values file: the child says so as Helm would
			}
			return nil, err
		}
		j.Files[path.Clean(file)] = data
	}
	input, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encoding the build for the render process: %w", err)
	}
	timeout := iso.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	memory := iso.MemoryBytes
	if memory == 0 {
		memory = 2 << 30
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, iso.Command[0], iso.Command[1:]...)
	cmd.Env = append(append([]string{}, iso.Env...), memoryEnv+"="+strconv.FormatUint(memory, 10), "GOMAXPROCS=1")
	cmd.Dir = os.TempDir()
	cmd.Stdin = bytes.NewReader(input)
	var stdout bytes.Buffer
	stderr := &headBuffer{max: 2048}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	runErr := cmd.Run()
	switch {
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return nil, &Error{Engine: engine, Path: dir, Err: &tree.LimitError{Limit: "render time in seconds",
			Max: int64(timeout.Seconds()), Got: int64(timeout.Seconds()), Path: displayDir(dir)}}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case runErr != nil && outOfMemory(stderr.String()):
		return nil, &Error{Engine: engine, Path: dir, Err: &tree.LimitError{Limit: "render memory in bytes",
			Max: int64(memory), Got: int64(memory), Path: displayDir(dir)}}
	case runErr != nil:
		return nil, &Error{Engine: engine, Path: dir, Err: fmt.Errorf("the render process failed: %v: %s", runErr, strings.TrimSpace(stderr.String()))}
	}
	var a answer
	if err := json.Unmarshal(stdout.Bytes(), &a); err != nil {
		return nil, &Error{Engine: engine, Path: dir, Err: fmt.Errorf("reading the render process's answer: %w", err)}
	}
	if a.Error != nil {
		return nil, a.Error.err()
	}
	objects := make([]manifest.Object, 0, len(a.Objects))
	for _, o := range a.Objects {
		objects = append(objects, manifest.Object{Unstructured: &unstructured.Unstructured{Object: o.Object}, Source: manifest.Source{File: o.File, Line: o.Line}})
	}
	return objects, nil
}

func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory")
}

// headBuffer keeps the first max bytes written to it (a crash's first
// lines say what happened; a goroutine dump follows).
type headBuffer struct {
	max int
	buf []byte
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *headBuffer) String() string {
	first, _, _ := strings.Cut(string(b.buf), "\n\n") // up to the goroutine dump
	return first
}

// ServeIsolated is the child's side of Isolation: it caps its own data
// memory, reads one build from in, renders it and writes the answer to out.
func ServeIsolated(in io.Reader, out io.Writer) error {
	if limit, err := strconv.ParseUint(os.Getenv(memoryEnv), 10, 64); err == nil && limit > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			return fmt.Errorf("capping the render process's memory: %w", err)
		}
		debug.SetMemoryLimit(int64(limit) / 2)
	}
	var j job
	if err := json.NewDecoder(in).Decode(&j); err != nil {
		return fmt.Errorf("reading the build: %w", err)
	}
	b := tree.NewBuilder(tree.Limits{}, func(key string) ([]byte, error) { return j.Files[key], nil })
	for name, data := range j.Files {
		if err := b.AddFile(name, int64(len(data)), name); err != nil {
			return err
		}
	}
	t := b.Build()
	var objects []manifest.Object
	var err error
	switch j.Engine {
	case Kustomize:
		objects, err = renderKustomize(context.Background(), t, j.Dir)
	case Helm:
		objects, err = renderHelm(context.Background(), t, j.Dir, j.Helm)
	default:
		err = fmt.Errorf("the render process renders Kustomize and Helm, not %q", j.Engine)
	}
	var a answer
	if err != nil {
		a.Error = toWire(err)
	}
	for _, o := range objects {
		a.Objects = append(a.Objects, wireObject{File: o.Source.File, Line: o.Source.Line, Object: o.Object})
	}
	return json.NewEncoder(out).Encode(a)
}

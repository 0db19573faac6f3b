package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// Isolation runs Kustomize and Helm builds in a child process that can be
// stopped: neither can be interrupted in-process, and a hostile chart (a
// template that loops a billion times) or kustomization would otherwise
// hold a worker and the controller's memory for as long as it likes. The
// child gets the files the build reads on stdin, nothing else — no
// environment, no credentials, "/" as its working folder, and an HTTP
// transport that refuses every request — renders them with the same code,
// and answers on stdout (at most maxOutputBytes). It is killed at Timeout,
// and its
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

// memoryEnv tells the child its memory cap.
const memoryEnv = "PLUMB_RENDER_MEMORY_BYTES"

// maxOutputBytes bounds what the controller reads back from one build.
const maxOutputBytes = 256 << 20

// ErrRenderProcess marks a failure of the render process itself (it could
// not start, or was killed from outside): not the build's fault, so it is
// retried rather than remembered for the revision.
var ErrRenderProcess = errors.New("the render process failed")

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

// render runs a Kustomize or Helm build in a child process.
func (iso *Isolation) render(ctx context.Context, t *tree.Tree, engine Engine, dir string, helm HelmOptions) ([]manifest.Object, error) {
	j := job{Engine: engine, Dir: dir, Helm: helm, Files: map[string][]byte{}}
	var files []string
	if engine == Kustomize {
		plan, err := planKustomize(t, dir) // refusals need no process
		if err != nil {
			return nil, err
		}
		files = plan.files()
	} else {
		chart, err := t.Files(dir)
		if err != nil {
			return nil, err
		}
		files = chart
	}
	err := readFiles(ctx, t, files, func(file string, data []byte) error {
		j.Files[file] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, file := range helm.ValuesFiles {
		data, err := t.ReadFile(file)
		switch {
		case errors.Is(err, tree.ErrNotExist):
			continue // the child says so, as in-process Helm would
		case err != nil:
			return nil, &Error{Engine: Helm, Path: dir, Err: fmt.Errorf("values file: %w", err)}
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
	cmd.Env = append(append([]string{}, iso.Env...), memoryEnv+"="+strconv.FormatUint(memory, 10), "GOMAXPROCS=1", "MALLOC_ARENA_MAX=2")
	cmd.Dir = "/"
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = bytes.NewReader(input)
	stdout := &cappedBuffer{max: maxOutputBytes}
	stderr := &headBuffer{max: 2048}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	runErr := cmd.Run()
	limit := func(name string, max int64) error {
		return &Error{Engine: engine, Path: dir, Err: &tree.LimitError{Limit: name, Max: max, Got: max, Path: displayDir(dir)}}
	}
	switch {
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return nil, limit("render time in seconds", int64(timeout.Seconds()))
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case stdout.exceeded:
		return nil, limit("render output in bytes", maxOutputBytes)
	case runErr != nil && outOfMemory(stderr.String()):
		return nil, limit("render memory in bytes", int64(memory))
	case runErr != nil:
		return nil, &Error{Engine: engine, Path: dir, Err: fmt.Errorf("%w: %v: %s", ErrRenderProcess, runErr, strings.TrimSpace(stderr.String()))}
	}
	var a answer
	if err := utiljson.Unmarshal(stdout.buf.Bytes(), &a); err != nil { // integers stay integers
		return nil, &Error{Engine: engine, Path: dir, Err: fmt.Errorf("%w: reading its answer: %v", ErrRenderProcess, err)}
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

// cappedBuffer keeps at most max bytes and notes when more came.
type cappedBuffer struct {
	max      int
	buf      bytes.Buffer
	exceeded bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		b.exceeded = true
		return 0, errors.New("render output limit exceeded")
	}
	return b.buf.Write(p)
}

// refuseAll is an HTTP transport that makes no request.
type refuseAll struct{}

func (refuseAll) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("the render process makes no network request (%s)", r.URL.Host)
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
	// Nothing a build does may reach the network (defence in depth: the
	// kustomizations were checked, and the child has no PATH for git).
	http.DefaultTransport = refuseAll{}
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

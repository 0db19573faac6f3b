package source_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// server is the package's Git server, started once in TestMain.
var server *gittest.Server

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Git: true}, func(e *testenv.Env) { server = e.Git })
}

var auth = source.AuthFromSecret(map[string][]byte{
	"username": []byte(gittest.Username),
	"password": []byte(gittest.Password),
})

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// repo pushes files as the first commit of a new repository.
func repo(t testing.TB, files map[string]string) (*gittest.Workdir, string, string) {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + ".git"
	w, err := server.NewWorkdir(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit("first", files); err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return w, name, server.HTTPURL(name)
}

func push(t testing.TB, w *gittest.Workdir, files map[string]string) string {
	t.Helper()
	hash, err := w.Commit("change", files)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return hash
}

// newReader makes a Reader that asks the remote on every read (no shared
// ls-remote window), so that tests see each push at once.
func newReader(t testing.TB, limits source.Limits) *source.Reader {
	t.Helper()
	r, err := source.NewReader(source.Options{CacheDir: t.TempDir(), Limits: limits, RefsTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(res *source.Result) []string {
	var out []string
	for _, o := range res.Objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

func TestAnUnchangedRepositoryCostsOneRoundTripAndNoRender(t *testing.T) {
	w, name, url := repo(t, map[string]string{"deploy/a.yaml": configMap("a", "1")})
	r := newReader(t, source.DefaultLimits())
	ctx := context.Background()
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}

	first, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || !strings.HasPrefix(first.Revision.String(), "main@sha1:") || len(first.Objects) != 1 {
		t.Fatalf("first read: cached=%v revision=%s objects=%v", first.Cached, first.Revision, names(first))
	}
	before := server.RequestCounts(name)

	second, err := r.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	after := server.RequestCounts(name)
	if !second.Cached || second.Revision != first.Revision {
		t.Errorf("second read of an unchanged repository: cached=%v revision=%s, want cached at %s", second.Cached, second.Revision, first.Revision)
	}
	if first.CommitTime.IsZero() || !second.CommitTime.Equal(first.CommitTime) {
		t.Errorf("commit times %v (rendered) and %v (cached), want one non-zero time", first.CommitTime, second.CommitTime)
	}
	if committed, err := w.Git("log", "-1", "--format=%ct"); err != nil || committed != strconv.FormatInt(first.CommitTime.Unix(), 10) {
		t.Errorf("commit time %v, git log says %s (%v)", first.CommitTime, committed, err)
	}
	wantDelta := map[string]int{gittest.RequestListRefs: 1, gittest.RequestFetch: 0}
	gotDelta := map[string]int{
		gittest.RequestListRefs: after[gittest.RequestListRefs] - before[gittest.RequestListRefs],
		gittest.RequestFetch:    after[gittest.RequestFetch] - before[gittest.RequestFetch],
	}
	if diff := cmp.Diff(wantDelta, gotDelta); diff != "" {
		t.Errorf("requests made by an unchanged read (-want +got):\n%s", diff)
	}

	t.Run("a new commit is fetched and rendered", func(t *testing.T) {
		hash := push(t, w, map[string]string{"deploy/b.yaml": configMap("b", "2")})
		third, err := r.Read(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if third.Cached || third.Revision.Hex() != hash || !cmp.Equal(names(third), []string{"ConfigMap/a", "ConfigMap/b"}) {
			t.Errorf("after a push: cached=%v revision=%s objects=%v", third.Cached, third.Revision, names(third))
		}
	})
	t.Run("Refresh skips the render cache", func(t *testing.T) {
		req := req
		req.Refresh = true
		res, err := r.Read(ctx, req)
		if err != nil || res.Cached {
			t.Errorf("refresh read: cached=%v err=%v", res != nil && res.Cached, err)
		}
	})
}

func TestForcePushIsReported(t *testing.T) {
	w, _, url := repo(t, map[string]string{"a.yaml": configMap("a", "1")})
	first, err := w.Git("rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	push(t, w, map[string]string{"a.yaml": configMap("a", "2")})
	r := newReader(t, source.DefaultLimits())
	req := source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Auth: auth}
	before, err := r.Read(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Git("reset", "--hard", first); err != nil {
		t.Fatal(err)
	}
	rewritten, err := w.Commit("rewritten", map[string]string{"a.yaml": configMap("a", "3")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("--force main"); err != nil {
		t.Fatal(err)
	}
	req.LastRevision = before.Revision.String()
	after, err := r.Read(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision.Hex() != rewritten || !after.HistoryRewritten {
		t.Errorf("after a force-push: revision=%s historyRewritten=%v, want %s and true", after.Revision, after.HistoryRewritten, rewritten)
	}
	// A normal fast-forward is not a rewrite.
	req.LastRevision = after.Revision.String()
	push(t, w, map[string]string{"a.yaml": configMap("a", "4")})
	next, err := r.Read(context.Background(), req)
	if err != nil || next.HistoryRewritten {
		t.Errorf("after a fast-forward: historyRewritten=%v err=%v, want false", next != nil && next.HistoryRewritten, err)
	}
}

func TestAnEmptyRenderIsReportedNotFailed(t *testing.T) {
	_, _, url := repo(t, map[string]string{"deploy/README.md": "no manifests here"})
	res, err := newReader(t, source.DefaultLimits()).Read(context.Background(),
		source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Empty() {
		t.Errorf("Empty() = false with %d objects", len(res.Objects))
	}
}

func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/org/repo.git"
}

func TestEveryErrorClass(t *testing.T) {
	const secretValue = "hunter2-do-not-print"
	_, _, url := repo(t, map[string]string{
		"ok/a.yaml":                 configMap("a", "1"),
		"bad-yaml/a.yaml":           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: " + secretValue + "\n   broken: indentation\n",
		"no-name/a.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
		"no-kind/a.yaml":            "apiVersion: v1\nmetadata: {name: a}\n",
		"no-apiversion/a.yaml":      "kind: ConfigMap\nmetadata: {name: a}\n",
		"dup/a.yaml":                configMap("same", "1"),
		"dup/sub/b.yaml":            configMap("same", "2"),
		"remote/kustomization.yaml": "resources:\n- https://github.com/org/repo//x?ref=v1\n",
		"gen/kustomization.yaml":    "secretGenerator:\n- name: creds\n  literals: [" + secretValue + "]\n",
		"many/a.yaml":               configMap("a", "1") + "---\n" + configMap("b", "2") + "---\n" + configMap("c", "3"),
		"big/a.yaml":                configMap("big", strings.Repeat("x", 2000)),
	})
	tests := []struct {
		name   string
		req    source.Request
		limits source.Limits
		reason source.Reason
		want   string
	}{
		{name: "wrong password", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Auth: git.Auth{Username: gittest.Username, Password: "wrong"}},
			reason: source.ReasonSourceUnavailable, want: "authentication failed"},
		{name: "server unreachable", req: source.Request{URL: closedPortURL(t), Ref: git.Ref{Branch: "main"}},
			reason: source.ReasonSourceUnavailable, want: "connection refused"},
		{name: "missing branch", req: source.Request{URL: url, Ref: git.Ref{Branch: "gone"}, Auth: auth},
			reason: source.ReasonRevisionNotFound, want: `branch "gone" not found at ` + url},
		{name: "malformed semver range", req: source.Request{URL: url, Ref: git.Ref{SemVer: "not a range"}, Auth: auth},
			reason: source.ReasonInvalidSpec, want: `semver range "not a range"`},
		{name: "missing path", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy/prod", Auth: auth},
			reason: source.ReasonRenderFailed, want: "deploy/prod: path not found in the repository"},
		{name: "kustomize remote base", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "remote", Auth: auth},
			reason: source.ReasonRenderFailed, want: "not a file or folder in the repository"},
		{name: "kustomize error quoting a secret", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "gen", Auth: auth},
			reason: source.ReasonRenderFailed, want: "kustomize build of gen: "},
		{name: "invalid YAML", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "bad-yaml", Auth: auth},
			reason: source.ReasonInvalidManifest, want: "bad-yaml/a.yaml:"},
		{name: "missing metadata.name", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "no-name", Auth: auth},
			reason: source.ReasonInvalidManifest, want: "no-name/a.yaml:1: ConfigMap has no metadata.name"},
		{name: "missing kind", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "no-kind", Auth: auth},
			reason: source.ReasonInvalidManifest, want: "no-kind/a.yaml:1: missing kind"},
		{name: "missing apiVersion", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "no-apiversion", Auth: auth},
			reason: source.ReasonInvalidManifest, want: "no-apiversion/a.yaml:1: missing apiVersion"},
		{name: "duplicate object", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "dup", Auth: auth},
			reason: source.ReasonInvalidManifest, want: "ConfigMap same is defined twice: in dup/a.yaml:1 and in dup/sub/b.yaml:1"},
		{name: "rendered object count", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "many", Auth: auth},
			limits: source.Limits{MaxObjects: 2}, reason: source.ReasonLimitExceeded, want: "rendered object count limit exceeded at many: 3 > 2"},
		{name: "single file size", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "ok", Auth: auth},
			limits: source.Limits{MaxFileBytes: 1024}, reason: source.ReasonLimitExceeded, want: "file size limit exceeded at big/a.yaml"},
		{name: "file count", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "ok", Auth: auth},
			limits: source.Limits{MaxFiles: 3}, reason: source.ReasonLimitExceeded, want: "file count limit exceeded"},
		{name: "repository size", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "ok", Auth: auth},
			limits: source.Limits{MaxTotalBytes: 1500}, reason: source.ReasonLimitExceeded, want: "repository size limit exceeded"},
		{name: "fetched pack", req: source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "ok", Auth: auth},
			limits: source.Limits{MaxFetchBytes: 100}, reason: source.ReasonLimitExceeded, want: "the pack is larger than 100 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newReader(t, tt.limits).Read(context.Background(), tt.req)
			var readErr *source.Error
			if !errors.As(err, &readErr) {
				t.Fatalf("got %v, want a *source.Error", err)
			}
			if readErr.Reason != tt.reason || source.ReasonOf(err) != tt.reason {
				t.Errorf("reason = %s, want %s (error: %v)", readErr.Reason, tt.reason, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			for _, secret := range []string{secretValue, gittest.Password, "wrong"} {
				if strings.Contains(err.Error(), secret) && !strings.Contains(tt.want, secret) {
					t.Errorf("error %q shows %q", err, secret)
				}
			}
		})
	}
}

func TestSymlinkLeavingTheRepositoryIsInvalid(t *testing.T) {
	w, _, url := repo(t, map[string]string{"deploy/a.yaml": configMap("a", "1")})
	if err := os.Symlink("../../../etc/passwd", w.Dir+"/deploy/b.yaml"); err != nil {
		t.Fatal(err)
	}
	push(t, w, nil)
	_, err := newReader(t, source.DefaultLimits()).Read(context.Background(),
		source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth})
	if source.ReasonOf(err) != source.ReasonInvalidManifest || !strings.Contains(err.Error(), "deploy/b.yaml") ||
		!strings.Contains(err.Error(), "leaves the repository root") {
		t.Errorf("got %v (%s), want InvalidManifest naming deploy/b.yaml", err, source.ReasonOf(err))
	}
}

func TestSSHUnknownHostKeyIsSourceUnavailable(t *testing.T) {
	_, name, _ := repo(t, map[string]string{"a.yaml": configMap("a", "1")})
	key, _, err := gittest.NewSSHKey()
	if err != nil {
		t.Fatal(err)
	}
	_, otherHostKey, err := gittest.NewSSHKey()
	if err != nil {
		t.Fatal(err)
	}
	knownHosts := knownhosts.Line([]string{knownhosts.Normalize(server.SSHAddress())}, otherHostKey)
	_, err = newReader(t, source.DefaultLimits()).Read(context.Background(), source.Request{
		URL: server.SSHURL(name), Ref: git.Ref{Branch: "main"},
		Auth: source.AuthFromSecret(map[string][]byte{"identity": key, "known_hosts": []byte(knownHosts)}),
	})
	if source.ReasonOf(err) != source.ReasonSourceUnavailable || !strings.Contains(err.Error(), "does not match known_hosts") {
		t.Errorf("got %v (%s), want SourceUnavailable about known_hosts", err, source.ReasonOf(err))
	}
}

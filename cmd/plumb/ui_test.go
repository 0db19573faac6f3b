package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/plumb-dev/plumb/localcluster"
)

// startUI runs plumb ui with the package cluster's kubeconfig and returns
// the URL it prints.
func startUI(t *testing.T) string {
	t.Helper()
	addr := localcluster.FreeAddrsForTest(t, 1)[0]
	cmd := exec.Command(plumbBinary, "ui", "--addr", addr, "--kubeconfig", cluster.KubeconfigPath)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if _, rest, ok := strings.Cut(scanner.Text(), "Serving the dashboard at "); ok {
				url <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-url:
		return u
	case <-time.After(time.Minute):
		t.Fatal("plumb ui printed no URL within a minute")
		return ""
	}
}

// browser is a headless Chromium (Debian's, installed by make browser).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: make browser installs it (bash hack/browser.sh)")
	}
	allocator, cancelAllocator := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(390, 844))...)
	ctx, cancel := chromedp.NewContext(allocator)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAllocator() })
	return ctx
}

// screenshot writes the page, as PNG (quality 100), into the tests' output folder
// ($PLUMB_TEST_OUTPUT, or plumb-test-output under the system's temporary
// folder).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("PLUMB_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "plumb-test-output")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestTheDashboardListsAppsInARealBrowser: plumb ui serves the Apps page,
// which a headless Chromium at phone width shows with the App's real
// status; the page carries a strict Content-Security-Policy.
func TestTheDashboardListsAppsInARealBrowser(t *testing.T) {
	w := newWorld(t, "cli-ui")
	ns := w.ns
	commit := w.push("first", map[string]string{"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello"})})
	w.createApp("web", "web", nil)
	w.waitReady("web", commit)
	url := startUI(t)

	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q, want default-src 'none' and no scripts", csp)
	}

	ctx := browser(t)
	rowID := chromedp.ID("app-" + ns + "-web")
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"?namespace="+ns), chromedp.WaitVisible(rowID)); err != nil {
		t.Fatalf("the Apps page: %v", err)
	}
	row, err := chromedp.Run(ctx, chromedp.Text(rowID))
	if err != nil {
		t.Fatal(err)
	}
	ready, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("count-ready")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ns, "web", "True", "main@sha1:" + commit[:7], "Applied revision main@sha1:" + commit} {
		if !strings.Contains(row, want) {
			t.Errorf("the App's row lacks %q: %q", want, row)
		}
	}
	if ready != "1" {
		t.Errorf("the Ready count = %q, want 1", ready)
	}
	screenshot(t, ctx, "apps")
}

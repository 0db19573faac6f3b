package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// process is one control-plane component that this package started itself
// (etcd and kube-apiserver are run by envtest). Its output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	exited  chan struct{} // closed once the process has exited
	waitErr error         // set before exited is closed
}

// startProcess runs binary with args, writing stdout and stderr to
// logDir/<name>.log. The process is killed if the test binary dies.
func startProcess(name, binary string, args []string, logDir string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating log of %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to grace, then kills. It returns an error only
// when the process had to be killed.
func (p *process) stop(grace time.Duration) error {
	defer p.logFile.Close()
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", p.name, grace)
}

// errIfExited reports a process that has already died, with its log's tail.
func (p *process) errIfExited() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tail(p.logPath, 30))
	default:
		return nil
	}
}

// waitHealthy polls https://127.0.0.1:port/healthz until it answers 200 OK,
// the process dies, or ctx ends.
func (p *process) waitHealthy(ctx context.Context, port int) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		// A local component's self-signed serving certificate on loopback.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	defer client.CloseIdleConnections()
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/healthz"
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := p.errIfExited(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addrs[0])
	return strconv.Atoi(port)
}

// FreeAddrs returns n distinct loopback addresses ("127.0.0.1:port") that
// nothing listens on now, for a process the caller is about to start.
// Every port stays held until all n are picked: the kernel may hand a
// port that was just released out again, so picking one at a time can
// give the same address twice.
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// FreeAddrsForTest is FreeAddrs for a test, which it fails when no port
// can be had.
func FreeAddrsForTest(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// tail returns the last n lines of a file (or why it could not be read).
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	ring := make([]string, 0, n)
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, scanner.Text())
	}
	if err := scanner.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		ring = append(ring, fmt.Sprintf("(reading %s: %v)", path, err))
	}
	out := ""
	for _, line := range ring {
		out += line + "\n"
	}
	return out
}

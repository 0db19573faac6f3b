package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// controllerProcess is `plumb controller` running against the local cluster.
type controllerProcess struct {
	cmd         *exec.Cmd
	logPath     string
	metricsAddr string
	webhookAddr string
	exited      chan error

	stopOnce sync.Once
	stopErr  error
}

// webhookSecret is the secret of every provider the e2e controllers serve.
const webhookSecret = "e2e-webhook-secret"

// startController runs plumb controller with debug logs in a file.
func startController(t *testing.T, name string, extra ...string) *controllerProcess {
	t.Helper()
	dir, err := os.MkdirTemp("", "plumb-controller-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	addrs := testenv.FreeAddrsForTest(t, 3)
	metricsAddr, webhookAddr, healthAddr := addrs[0], addrs[1], addrs[2]
	secretFile := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(webhookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"controller",
		"--webhook-addr", webhookAddr,
		"--webhook-secret-file", "github=" + secretFile,
		"--webhook-secret-file", "gitlab=" + secretFile,
		"--webhook-secret-file", "gitea=" + secretFile,
		"--webhook-secret-file", "harbor=" + secretFile,
		"--kubeconfig", cluster.KubeconfigPath,
		"--health-addr", healthAddr, "--metrics-addr", metricsAddr,
		"--git-cache-dir", filepath.Join(dir, "git"),
		"--log-level", "debug", "--log-encoding", "console",
		"--shutdown-timeout", "10s",
		// The tests' sinks listen on loopback, which the defaults block.
		"--notification-block-default-cidrs=false", "--notification-blocked-cidrs", "169.254.0.0/16,fe80::/10",
	}, extra...)
	cmd := exec.Command(plumbBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{cmd: cmd, logPath: logPath, metricsAddr: metricsAddr, webhookAddr: webhookAddr, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait(); logFile.Close() }()
	return p
}

// stop sends SIGTERM and waits up to 30s; it returns the exit error. A
// second stop returns the first one's error.
func (p *controllerProcess) stop() error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case p.stopErr = <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			p.stopErr = <-p.exited
			if p.stopErr == nil {
				p.stopErr = errors.New("killed after 30 s")
			}
		}
	})
	return p.stopErr
}

// tail is the end of the controller's log.
func (p *controllerProcess) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

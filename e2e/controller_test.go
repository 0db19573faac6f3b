package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// controllerProcess is `plumb controller` running against the local cluster.
type controllerProcess struct {
	cmd         *exec.Cmd
	logPath     string
	metricsAddr string
	exited      chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

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
	metricsAddr := freeAddr(t)
	args := append([]string{"controller",
		"--kubeconfig", cluster.KubeconfigPath,
		"--health-addr", freeAddr(t), "--metrics-addr", metricsAddr,
		"--git-cache-dir", filepath.Join(dir, "git"),
		"--log-level", "debug", "--log-encoding", "console",
		"--shutdown-timeout", "10s",
	}, extra...)
	cmd := exec.Command(plumbBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{cmd: cmd, logPath: logPath, metricsAddr: metricsAddr, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait(); logFile.Close() }()
	return p
}

// stop sends SIGTERM and waits up to 30s; it returns the exit error.
func (p *controllerProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return <-p.exited
	}
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

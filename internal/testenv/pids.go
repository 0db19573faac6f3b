package testenv

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
)

// PIDs finds the running processes of the cluster's components (etcd and
// kube-apiserver among them), keyed by executable name: every component
// names the cluster's folder on its command line, so no other cluster's
// processes match. Benchmarks read their CPU time and memory from /proc.
func (c *Cluster) PIDs() (map[string]int, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	pids := map[string]int{}
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 {
			continue // gone, or not ours to read
		}
		if namesFolder(args[1:], c.Dir) {
			pids[filepath.Base(args[0])] = p.PID
		}
	}
	return pids, nil
}

// namesFolder reports whether an argument is dir or a path inside it (as a
// whole, or as the value of a --flag=value), so that /tmp/x-1 does not match
// /tmp/x-12.
func namesFolder(args []string, dir string) bool {
	for _, arg := range args {
		if _, value, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(arg, "-") {
			arg = value
		}
		if arg == dir || strings.HasPrefix(arg, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

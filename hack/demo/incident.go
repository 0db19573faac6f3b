package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// incident is the on-call walk-through: the operator's CLI, run for real
// (the plumb binary, with the demo's kubeconfig), and its output shown.
// A hand-made hotfix is held still with suspend, seen with diff, made
// permanent in a working copy and previewed with diff --path, pushed, and
// resumed with a sync that waits for its outcome.
func (s *story) incident(ctx context.Context) error {
	s.n.say("An incident, handled with plumb's CLI (what follows is its real output):")
	if err := s.cli(ctx, 0, "get", "apps", "-A"); err != nil {
		return err
	}
	if err := s.cli(ctx, 0, "suspend", "shop", "-n", "default"); err != nil {
		return err
	}
	settings := &corev1.ConfigMap{}
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "settings"}, settings); err != nil {
		return err
	}
	settings.Data["color"] = "hotfix"
	if err := s.k8s.Update(ctx, settings, client.FieldOwner("kubectl-edit")); err != nil {
		return err
	}
	s.n.say("Changed ConfigMap shop/settings by hand, as kubectl edit does (color=hotfix); the App is suspended, so plumb leaves it")
	if err := s.cli(ctx, 1, "diff", "shop", "-n", "default"); err != nil {
		return err
	}
	hotfix := strings.Replace(s.read("deploy/configmap.yaml"), "color: green", "color: hotfix\n  incident: INC-42", 1)
	if err := s.repo.WriteFiles(map[string]string{"deploy/configmap.yaml": hotfix}); err != nil {
		return err
	}
	s.n.say("Wrote the hotfix into a working copy of the repository, with a note, and previewed it before pushing:")
	if err := s.cli(ctx, 1, "diff", "shop", "-n", "default", "--path", filepath.Join(s.repo.Dir, "deploy")); err != nil {
		return err
	}
	sixth, err := s.push("Keep the hotfix", nil)
	if err != nil {
		return err
	}
	s.n.say("Pushed R6 (%s) with the hotfix, and resumed the App:", onMain(sixth))
	if err := s.cli(ctx, 0, "resume", "shop", "-n", "default", "--wait"); err != nil {
		return err
	}
	if err := s.cli(ctx, 0, "tree", "shop", "-n", "default"); err != nil {
		return err
	}
	return s.waitReady(ctx, sixth)
}

// cli runs plumb with args, prints the command line and what it printed,
// and fails unless it exits with code.
func (s *story) cli(ctx context.Context, code int, args ...string) error {
	cmd := exec.CommandContext(ctx, s.plumbBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	got := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		got = exit.ExitCode()
	case err != nil:
		return fmt.Errorf("running plumb %s: %w", strings.Join(args, " "), err)
	}
	fmt.Fprintf(s.n.w, "\n  $ plumb %s\n", strings.Join(args, " "))
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Fprintf(s.n.w, "    %s\n", line)
	}
	fmt.Fprintln(s.n.w)
	if got != code {
		return fmt.Errorf("plumb %s exited with %d, want %d", strings.Join(args, " "), got, code)
	}
	return nil
}

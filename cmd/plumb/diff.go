package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/preview"
	"github.com/plumb-dev/plumb/internal/preview/diffreport"
	"github.com/plumb-dev/plumb/internal/reconcile"
	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/git"
)

// Exit codes of plumb diff, as kubectl diff and flux diff use them.
const (
	diffSame   = 0
	diffDiffer = 1
	diffFailed = 2
)

type diffFlags struct {
	revision     string
	path         string
	output       string
	color        string
	gitCacheDir  string
	withMyRights bool
	policy       reconcile.Policy
	// allowPlugins lets a destination's kubeconfig run a credential plugin
	// on this machine.
	allowPlugins bool
}

func newDiffCommand(cluster *clusterFlags) *cobra.Command {
	var f diffFlags
	cmd := &cobra.Command{
		Use:   "diff APP",
		Short: "Show what the next tick of an App would change, without changing anything",
		Long: `Show what the next tick of an App would change: the controller's own Read, Observe and
Diff, run here without Apply. The App's source is read from Git (or, with --path, from a
working copy on this machine), rendered as the controller renders it, and compared with the
live objects, the App's ignore rules included; each object the tick would change is shown as
a unified YAML diff from the live object to Git, marked created, updated, pruned or drifted
(with the field manager who changed it). Secret values are masked.

Everything is read, and each change is dry-run, with your kubeconfig's identity: RBAC
decides what you may see (you need get on the App, its credentials Secret, its objects and
the ServiceAccount it acts as, if any, and patch on the objects the tick would change, for
their dry-runs). Nothing is written.
The App's repository is fetched from this machine: whoever wrote the App chose the host it
names. An App that acts as a ServiceAccount is previewed as that ServiceAccount, as the controller
acts (you need the right to impersonate it; --with-my-rights uses yours), and the tick's
check that the ServiceAccount may make every write is made too. The controller's lockdown
flags cannot be read from the cluster: pass --no-cross-namespace and
--default-service-account as the controller runs with them.

Exit status: 0 when the cluster equals Git, 1 when it differs, 2 on an error (as kubectl
diff and flux diff), so that CI can gate on it.`,
		Example: `  # What would the next tick of App web in namespace shop change?
  plumb diff web -n shop

  # Preview a change in a working copy before pushing it
  plumb diff web -n shop --path ./apps/web

  # The diff against another commit, as JSON for a script
  plumb diff web -n shop --revision 3f1c9e0d2b7a4c5e8f9a0b1c2d3e4f5a6b7c8d9e -o json`,
		// A usage error is an error too (2), never "differs" (1).
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return &exitError{code: diffFailed, err: err}
			}
			return nil
		},
		ValidArgsFunction: cluster.completeApps,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := runDiff(cmd, cluster, args[0], f)
			if err != nil {
				return &exitError{code: diffFailed, err: err}
			}
			if code != diffSame {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: diffFailed, err: err} })
	flags := cmd.Flags()
	flags.StringVar(&f.revision, "revision", "", "diff this revision instead of the App's ref: a commit (40 hex digits, or a recorded revision such as main@sha1:<hex>), a branch (or heads/NAME), or tags/NAME; for an OCI App a tag (or tags/NAME) or a digest (sha256:<hex>, or a recorded revision such as v1@sha256:<hex>)")
	flags.StringVar(&f.path, "path", "", "diff a working copy of the App's folder on this machine instead of its Git source")
	flags.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	flags.StringVar(&f.color, "color", "auto", "colour the diff: auto (on a terminal, unless NO_COLOR is set), always or never")
	flags.BoolVar(&f.policy.NoCrossNamespace, "no-cross-namespace", false, "preview as a controller run with --no-cross-namespace would tick")
	flags.BoolVar(&f.policy.AllowInsecureRegistries, "allow-insecure-registries", false, "preview as a controller run with --allow-insecure-registries would tick: an OCI, Helm or bucket App may read its registry, repository or S3 server over plain HTTP, and a chart its dependencies")
	flags.StringVar(&f.policy.DefaultServiceAccount, "default-service-account", "", "preview as a controller run with --default-service-account would tick: an App naming no ServiceAccount acts as this one")
	flags.BoolVar(&f.policy.NoRemoteClusters, "no-remote-clusters", false, "preview as a controller run with --no-remote-clusters would tick: an App naming another cluster fails")
	flags.BoolVar(&f.allowPlugins, "allow-kubeconfig-plugins", false, "let the kubeconfig of an App's destination (spec.destination) run its exec credential plugin or auth-provider on this machine")
	flags.BoolVar(&f.withMyRights, "with-my-rights", false, "preview an App that acts as a ServiceAccount with your own rights, not by impersonating the ServiceAccount")
	flags.StringVar(&f.gitCacheDir, "git-cache-dir", "", "folder that keeps the clones of repositories between runs, for one run at a time (default: a new folder each run, removed after it)")
	_ = cmd.MarkFlagDirname("path")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("color", cobra.FixedCompletions([]string{"auto", "always", "never"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// runDiff previews the App and prints it; it returns diffSame or
// diffDiffer, or an error.
func runDiff(cmd *cobra.Command, cluster *clusterFlags, name string, f diffFlags) (int, error) {
	if f.output != "text" && f.output != "json" {
		return 0, fmt.Errorf("--output %q: use text or json", f.output)
	}
	if f.revision != "" && f.path != "" {
		return 0, errors.New("--revision and --path exclude each other: a working copy has no revision")
	}
	color, err := useColor(f.color)
	if err != nil {
		return 0, err
	}
	key, err := cluster.appKey(name)
	if err != nil {
		return 0, err
	}
	cfg, err := cluster.restConfig()
	if err != nil {
		return 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding plumb's own binary, which renders Kustomize and Helm builds in a child process: %w", err)
	}
	cacheDir := f.gitCacheDir
	if cacheDir == "" {
		// Its own clone each run (a working copy's chart dependencies
		// too): runs at once (a CI matrix) share nothing.
		if cacheDir, err = os.MkdirTemp("", "plumb-diff-"); err != nil {
			return 0, err
		}
		defer os.RemoveAll(cacheDir)
	}
	policy := f.policy
	if f.withMyRights {
		policy.DefaultServiceAccount = ""
	}
	previewer, err := preview.New(preview.Options{Config: cfg, GitCacheDir: cacheDir, LocalDir: f.path, Policy: policy,
		RenderCommand: []string{self, renderSandboxCommand}, AllowKubeConfigPlugins: f.allowPlugins})
	if err != nil {
		return 0, err
	}
	ctx := contextOf(cmd)
	app := &plumbv1.App{}
	if err := previewer.Client().Get(ctx, key, app); err != nil {
		return 0, explain(err, key)
	}
	sa := f.policy.ServiceAccountOf(app)
	if f.withMyRights {
		app.Spec.ServiceAccountName = ""
	}
	if f.revision != "" {
		if err := atRevision(app, f.revision); err != nil {
			return 0, err
		}
	}
	p, err := previewer.Preview(ctx, app)
	if err != nil {
		err = describePhaseError(err)
		if sa != "" && !f.withMyRights && strings.Contains(err.Error(), "cannot impersonate") {
			err = fmt.Errorf("%w\n(the App acts as ServiceAccount %s/%s; previewing it as the controller would needs the right to impersonate it: plumb diff --with-my-rights previews with your own rights)", err, key.Namespace, sa)
		}
		return 0, err
	}
	if err := sameChartArchive(app, f.revision, p.Revision); err != nil {
		return 0, err
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		err = diffreport.WriteJSON(out, key.String(), p)
	} else {
		err = diffreport.Write(out, p, diffreport.Options{Color: color})
	}
	if err != nil {
		return 0, err
	}
	counts := diffreport.CountsOf(p)
	if counts.Refused > 0 {
		return 0, fmt.Errorf("the API server refuses %d of the objects: the next tick's Apply phase would fail", counts.Refused)
	}
	if counts.Differs() {
		return diffDiffer, nil
	}
	return diffSame, nil
}

// shortCommit is an abbreviated commit, which Git cannot fetch by name.
var shortCommit = regexp.MustCompile(`^[0-9a-f]{7,39}$`)

// atRevision points the App's source at --revision.
func atRevision(app *plumbv1.App, rev string) error {
	if app.Spec.Source.Bucket != nil {
		return fmt.Errorf("--revision %q: a bucket keeps no revisions to choose from; plumb diff reads it as it is now (leave --revision out)", rev)
	}
	if h := app.Spec.Source.Helm; h != nil {
		version, err := parseHelmRevision(rev)
		h.Version = version
		return err
	}
	if o := app.Spec.Source.OCI; o != nil {
		ref, err := parseOCIRevision(rev)
		o.Ref = ref
		return err
	}
	ref, err := parseRevision(rev)
	app.Spec.Source.SetGitRef(ref)
	return err
}

// ociDigest is a manifest digest as --revision names one.
var ociDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// parseOCIRevision reads --revision for an OCI App: a digest, alone or
// recorded after its tag, or a tag.
func parseOCIRevision(rev string) (plumbv1.OCIRef, error) {
	if recorded := revision.Parse(rev); recorded.Algorithm() == revision.SHA256 {
		if !ociDigest.MatchString(recorded.Digest) {
			return plumbv1.OCIRef{}, fmt.Errorf("--revision %q: a digest is sha256: and 64 hex digits", rev)
		}
		return plumbv1.OCIRef{Digest: recorded.Digest}, nil
	}
	tag := strings.TrimPrefix(rev, "tags/")
	if !ociTag.MatchString(tag) {
		return plumbv1.OCIRef{}, fmt.Errorf("--revision %q: an OCI App's revision is a tag (letters, digits, '.', '_', '-') or a digest, sha256:<64 hex>", rev)
	}
	return plumbv1.OCIRef{Tag: tag}, nil
}

// parseHelmRevision reads --revision for a Helm App: a chart version
// (1.2.3, or v1.2.3 as some charts spell theirs), alone or as recorded
// (<version>@sha256:<digest>; sameChartArchive checks the digest).
func parseHelmRevision(rev string) (string, error) {
	version := revision.Parse(rev).Name
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v")); err != nil {
		return "", fmt.Errorf("--revision %q: a Helm App's revision is a chart version such as 1.2.3, alone or as recorded (1.2.3@sha256:<digest>)", rev)
	}
	return version, nil
}

// sameChartArchive refuses a Helm App's preview at a recorded revision
// whose chart archive is no longer the recorded one: a repository serves a
// version's archive by its version only, so a republished version cannot
// be read at its old digest, and the preview must not pass it off as such.
func sameChartArchive(app *plumbv1.App, rev, previewed string) error {
	recorded := revision.Parse(rev)
	if app.Spec.Source.Helm == nil || recorded.Digest == "" {
		return nil
	}
	if got := revision.Parse(previewed); got.Digest != recorded.Digest {
		return fmt.Errorf("--revision %q: the repository's chart %s is now %s, not the recorded %s; the recorded archive cannot be read any more (--revision %s previews what it holds now)",
			rev, recorded.Name, got.Digest, recorded.Digest, recorded.Name)
	}
	return nil
}

// ociTag is a well-formed OCI tag.
var ociTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// parseRevision reads --revision.
func parseRevision(rev string) (plumbv1.GitRef, error) {
	hash := rev
	if recorded := git.ParseRevision(rev); recorded.Hash != "" {
		hash = recorded.Hash
	}
	switch {
	case plumbing.IsHash(hash):
		return plumbv1.GitRef{Commit: strings.ToLower(hash)}, nil
	case strings.HasPrefix(rev, "heads/"):
		return plumbv1.GitRef{Branch: strings.TrimPrefix(rev, "heads/")}, nil
	case shortCommit.MatchString(rev):
		return plumbv1.GitRef{}, fmt.Errorf("--revision %q: give the whole commit, 40 hex digits (git rev-parse %s), or heads/%s for a branch of that name", rev, rev, rev)
	case strings.HasPrefix(rev, "tags/"):
		return plumbv1.GitRef{Tag: strings.TrimPrefix(rev, "tags/")}, nil
	case strings.Contains(rev, "sha1:") || rev == "":
		return plumbv1.GitRef{}, fmt.Errorf("--revision %q: a commit is 40 hex digits", rev)
	}
	return plumbv1.GitRef{Branch: rev}, nil
}

// useColor decides --color.
func useColor(mode string) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		_, noColor := os.LookupEnv("NO_COLOR")
		return !noColor && term.IsTerminal(int(os.Stdout.Fd())), nil
	}
	return false, fmt.Errorf("--color %q: use auto, always or never", mode)
}

// describePhaseError says which phase failed, as the App's status would.
func describePhaseError(err error) error {
	var phaseErr *reconcile.PhaseError
	if !errors.As(err, &phaseErr) {
		return err
	}
	reason := phaseErr.Reason
	if phaseErr.Detail != "" {
		reason += ", " + phaseErr.Detail
	}
	return fmt.Errorf("%s phase failed (%s): %v", phaseErr.Phase, reason, phaseErr.Err)
}

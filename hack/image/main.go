// Command image writes plumb's container image (package ociimage) from a
// static binary into a tarball and prints its reference and digest. `make
// image` builds the binary and runs it; no container engine is needed.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/plumb-dev/plumb/hack/image/ociimage"
)

func main() {
	binary := flag.String("binary", "", "the static Linux binary of plumb")
	arch := flag.String("arch", "amd64", "its GOARCH")
	version := flag.String("version", "dev", "plumb's version (a label, and the tag)")
	commit := flag.String("commit", "unknown", "the commit it was built from (a label)")
	source := flag.String("source", "", "the repository's URL (a label)")
	created := flag.String("created", "0", "the image's time in Unix seconds: the commit's, so that builds are reproducible")
	repository := flag.String("repository", "ghcr.io/plumb-dev/plumb", "the image's repository")
	out := flag.String("out", "", "the tarball to write")
	flag.Parse()
	if err := run(*binary, *arch, *version, *commit, *source, *created, *repository, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, arch, version, commit, source, created, repository, out string) error {
	if binary == "" || out == "" {
		return fmt.Errorf("--binary and --out are required")
	}
	seconds, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: want Unix seconds: %w", created, err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	img, err := ociimage.Build(ociimage.Spec{Binary: data, Arch: arch, Version: version, Commit: commit,
		Source: source, Created: time.Unix(seconds, 0)})
	if err != nil {
		return err
	}
	ref := repository + ":" + version
	digest, err := ociimage.Write(out, img, ref)
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	fmt.Printf("image:  %s\ndigest: %s\nfile:   %s\n", ref, digest, out)
	return nil
}

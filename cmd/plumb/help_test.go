package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasExamples walks the command tree: each command a
// person runs shows examples in --help.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Example == "" {
				t.Errorf("plumb %s has no examples in --help", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRootCommand(buildInfo{}))
}

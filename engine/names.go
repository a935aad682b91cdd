package engine

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Names works out what a version of an application is called in Kafka and
// on disk: its consumer group, its internal topics (changelogs, repartition
// topics) and its state directory. The engine, the versions package, the
// HTTP layer and the CLI all name things through it.
type Names struct {
	AppID   string
	Version string // "" for an application without versions
}

// NamesOf are the names of the application a Config configures.
func NamesOf(cfg Config) Names { return Names{AppID: cfg.AppID, Version: cfg.Version} }

// Group is the consumer group: the AppID, or "<AppID>-<Version>". It
// prefixes every internal topic.
func (n Names) Group() string {
	if n.Version == "" {
		return n.AppID
	}
	return n.AppID + "-" + n.Version
}

// InternalTopic is the real name of an internal topic, given the base name
// Topology.Describe shows after "${app}-".
func (n Names) InternalTopic(base string) string { return n.Group() + "-" + base }

// ChangelogTopic is the changelog topic of a store (one that keeps a
// changelog; a global table's is its source topic, see App.ChangelogTopic).
func (n Names) ChangelogTopic(store string) string {
	return n.InternalTopic(topo.ChangelogTopic(store))
}

// IsInternalTopic reports whether a topic is named as one of the group's
// internal topics are: the group's prefix and an internal suffix. (A
// longer group, "<AppID>-<Version>-x", shares the prefix: tell them apart
// by the versions registered.)
func (n Names) IsInternalTopic(topic string) bool {
	return strings.HasPrefix(topic, n.Group()+"-") && HasInternalSuffix(topic)
}

// StateDir is the default state directory of an instance:
// <DefaultStateRoot()>/<group>/<instanceID>.
func (n Names) StateDir(instanceID string) string {
	return filepath.Join(n.GroupStateDir(DefaultStateRoot()), instanceID)
}

// GroupStateDir is where, under root, the group's instances keep their
// state by default: <root>/<group>.
func (n Names) GroupStateDir(root string) string { return filepath.Join(root, n.Group()) }

// DefaultStateRoot holds the default state directories:
// <os.TempDir()>/oxbow.
func DefaultStateRoot() string { return filepath.Join(os.TempDir(), "oxbow") }

// internalSuffixes end the engine's internal topics: changelogs,
// repartition topics, and the subscription and response topics of
// foreign-key joins.
var internalSuffixes = []string{"-changelog", "-repartition", "-subscription", "-response"}

// HasInternalSuffix reports whether a topic ends as the engine's internal
// topics do.
func HasInternalSuffix(topic string) bool {
	for _, s := range internalSuffixes {
		if strings.HasSuffix(topic, s) {
			return true
		}
	}
	return false
}

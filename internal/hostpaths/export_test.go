package hostpaths

// ConfigEntry and ConfigEntries expose the config reader to the external
// tests, which run git (internal/testenv, which they need, imports this
// package).
type ConfigEntry = configEntry

func ConfigEntries(cfg []byte) ([]ConfigEntry, bool) { return configEntries(cfg) }

func NamedBy(key, val, configDir, worktree, home string) []Named {
	return namedBy(key, val, configDir, worktree, home)
}

func (e ConfigEntry) Parts() (key, value string, hasValue bool) { return e.key, e.value, e.hasValue }

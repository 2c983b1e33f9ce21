package proxy

import "github.com/seed-a07d1050/portcullis/internal/config"

// SetTestHooks makes binding a listener and building a route table fail
// when the given functions say so, for the tests of failed reloads; nil
// removes a hook. The returned function restores the hooks as they were.
func SetTestHooks(bind func(config.Listener) error, buildTable func(listener string) error) (restore func()) {
	oldBind, oldBuild := testHookBind, testHookBuildTable
	testHookBind, testHookBuildTable = bind, buildTable
	return func() { testHookBind, testHookBuildTable = oldBind, oldBuild }
}

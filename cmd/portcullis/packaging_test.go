package main

import (
	"bufio"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// There is no Docker engine or systemd manager where the tests run, so the
// Dockerfile and the unit are checked for the properties they promise by
// reading them. .ci/run also verifies the unit with systemd-analyze where
// it is installed.

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// readDockerfile splits a Dockerfile into instructions: comments and blank
// lines dropped, lines ending in a backslash joined to the next.
func readDockerfile(t *testing.T, file string) []dockerInstruction {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerInstruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, more := strings.CutSuffix(line, "\\"); more {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args), start})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur.Len() != 0 {
		t.Fatalf("%s ends inside a continued line", file)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t, "../../Dockerfile")
	var froms, runs, exposes []dockerInstruction
	final := -1 // index of the last FROM
	for i, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in)
			final = i
		case "RUN":
			runs = append(runs, in)
		case "EXPOSE":
			exposes = append(exposes, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%d FROM lines: want a multi-stage build", len(froms))
	}
	base := strings.Fields(froms[len(froms)-1].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage FROM %s: want distroless/static (CA roots, no libc) or scratch", base)
	}

	var build string
	for _, r := range runs {
		if strings.Contains(r.args, "go build") {
			build = r.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/portcullis"} {
		if !strings.Contains(build, want) {
			t.Errorf("the go build step lacks %s: %q", want, build)
		}
	}

	// The final stage runs as a user that is not root.
	var user, entry, cmd string
	var copies []string
	for _, in := range ins[final+1:] {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entry = in.args
		case "CMD":
			cmd = in.args
		case "COPY":
			copies = append(copies, in.args)
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		t.Errorf("final stage USER %q: want an unprivileged user", user)
	}
	if !strings.Contains(entry, "/usr/local/bin/portcullis") {
		t.Errorf("ENTRYPOINT %s does not run /usr/local/bin/portcullis", entry)
	}
	const defaultConfig = "/etc/portcullis/portcullis.yaml"
	if !strings.Contains(cmd, `"run", "--config", "`+defaultConfig+`"`) {
		t.Errorf("CMD %s does not run --config %s", cmd, defaultConfig)
	}
	copied := strings.Join(copies, "\n")
	if !strings.Contains(copied, "/usr/local/bin/portcullis") || !strings.Contains(copied, "/etc/portcullis/") {
		t.Errorf("the final stage does not copy the binary and the configuration:\n%s", copied)
	}
	// The configuration copied in is an example that a test checks.
	if !slices.ContainsFunc(runs, func(r dockerInstruction) bool {
		return strings.Contains(r.args, "examples/container.yaml") && strings.Contains(r.args, defaultConfig[1:])
	}) {
		t.Error("no RUN step puts examples/container.yaml at " + defaultConfig)
	}

	// EXPOSE names the ports of that configuration.
	ports := strings.Join(func() []string {
		var p []string
		for _, e := range exposes {
			p = append(p, e.args)
		}
		return p
	}(), " ")
	cfg, err := config.Load("../../examples/container.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range append([]string{cfg.Admin.Listen}, cfg.Listeners[0].Listen) {
		_, port, _ := strings.Cut(addr, ":")
		if !slices.Contains(strings.Fields(ports), port+"/tcp") {
			t.Errorf("EXPOSE %q lacks %s/tcp, where examples/container.yaml listens", ports, port)
		}
	}

	// The Go image can build the module: its version is at least go.mod's.
	goMod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	var arg string
	for _, in := range ins {
		if v, ok := strings.CutPrefix(in.args, "GO_VERSION="); in.cmd == "ARG" && ok {
			arg = v
		}
	}
	if want == nil || arg != string(want[1]) {
		t.Errorf("ARG GO_VERSION=%s, want go.mod's %s", arg, want)
	}
}

// readUnit returns the settings of one section of a systemd unit file:
// key to values, in order (a key may be set several times).
func readUnit(t *testing.T, file, section string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			in = line == "["+section+"]"
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not KEY=VALUE", file, line)
			}
			out[k] = append(out[k], v)
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	const file = "../../deploy/systemd/portcullis.service"
	svc := readUnit(t, file, "Service")
	one := func(key string) string {
		t.Helper()
		v := svc[key]
		if len(v) != 1 {
			t.Errorf("%s set %d times, want once", key, len(v))
			return ""
		}
		return v[0]
	}
	for key, want := range map[string]string{
		"Type":                     "notify",
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"DynamicUser":              "yes",
		"AmbientCapabilities":      "CAP_NET_BIND_SERVICE",
		"CapabilityBoundingSet":    "CAP_NET_BIND_SERVICE",
		"NoNewPrivileges":          "yes",
		"ProtectSystem":            "strict",
		"ProtectHome":              "yes",
		"PrivateTmp":               "yes",
		"PrivateDevices":           "yes",
		"RestartPreventExitStatus": strconv.Itoa(exitUsage),
		"ExecStart":                "/usr/local/bin/portcullis run --config /etc/portcullis/portcullis.yaml",
	} {
		if got := one(key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	families := strings.Fields(one("RestrictAddressFamilies"))
	for _, f := range []string{"AF_INET", "AF_INET6", "AF_UNIX"} {
		if !slices.Contains(families, f) {
			t.Errorf("RestrictAddressFamilies lacks %s (AF_UNIX carries NOTIFY_SOCKET)", f)
		}
	}
	if !slices.Contains(svc["SystemCallFilter"], "@system-service") {
		t.Errorf("SystemCallFilter=%q lacks @system-service", svc["SystemCallFilter"])
	}
	if n, err := strconv.Atoi(one("LimitNOFILE")); err != nil || n < 65536 {
		t.Errorf("LimitNOFILE=%v: want room for many connections", svc["LimitNOFILE"])
	}
	// systemd must not kill the daemon while it drains.
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil || stop <= config.DefaultShutdownTimeout {
		t.Errorf("TimeoutStopSec=%v, want more than the default shutdown_timeout %v", svc["TimeoutStopSec"], config.DefaultShutdownTimeout)
	}
	if exe := strings.Fields(one("ExecStart")); len(exe) > 0 && path.Base(exe[0]) != "portcullis" {
		t.Errorf("ExecStart runs %s", exe[0])
	}
}

// TestSystemdNotifyReloadDropIn holds the drop-in for systemd 253 and later:
// Type=notify-reload, under which systemd sends SIGHUP itself, and so an
// empty ExecReload= that clears the unit's kill (which would reload twice).
func TestSystemdNotifyReloadDropIn(t *testing.T) {
	svc := readUnit(t, "../../deploy/systemd/notify-reload.conf", "Service")
	if got := svc["Type"]; !slices.Equal(got, []string{"notify-reload"}) {
		t.Errorf("Type=%q, want notify-reload once", got)
	}
	if got := svc["ExecReload"]; !slices.Equal(got, []string{""}) {
		t.Errorf("ExecReload=%q, want one empty ExecReload= to clear the unit's kill -HUP", got)
	}
	if len(svc) != 2 {
		t.Errorf("the drop-in sets %d keys, want Type and ExecReload only: %v", len(svc), svc)
	}
}

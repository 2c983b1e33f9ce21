package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

type decodeDoc struct {
	Name    string          `yaml:"name"`
	Count   int             `yaml:"count"`
	Cluster *config.Cluster `yaml:"cluster"`
}

// Decode reads another command's file with the daemon's rules and errors,
// and ValidateCluster checks its cluster block as Parse would.
func TestDecode(t *testing.T) {
	var d decodeDoc
	_, err := config.Decode("f.yaml", []byte("name: x\ncoutn: 3\n"), &d)
	if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), `f.yaml:2:1: coutn: unknown field; did you mean "count"?`) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := config.Decode("f.yaml", nil, &d); err != nil {
		t.Fatalf("an empty document: %v", err)
	}
	if _, err := config.Decode("f.yaml", []byte("name: x\n"), d); err == nil {
		t.Fatal("a non-pointer accepted")
	}
	pos, err := config.Decode("f.yaml", []byte("name: x\ncluster:\n  redis: {addrs: []}\n  node_share: 2\n"), &d)
	if err != nil {
		t.Fatal(err)
	}
	if p, exact := pos.At("cluster.node_share"); !exact || p.Line != 4 || p.Column != 15 {
		t.Errorf("position of cluster.node_share: %+v %v", p, exact)
	}
	err = config.ValidateCluster(d.Cluster, pos)
	for _, want := range []string{"f.yaml:3:18: cluster.redis.addrs: at least one host:port is required", "f.yaml:4:15: cluster.node_share: must be from 0 to 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateCluster: %v, want %s", err, want)
		}
	}
	if e := pos.Errorf("name", "bad (got %q)", "x"); e.Error() != `f.yaml:1:7: name: bad (got "x")` {
		t.Errorf("Errorf: %v", e)
	}
}

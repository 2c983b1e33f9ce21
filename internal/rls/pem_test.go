package rls

import (
	"encoding/pem"
	"os"
	"testing"
)

func writePEM(t *testing.T, file string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

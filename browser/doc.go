// Package browser holds the tests that open Portcullis's live page in a
// real Chromium, driven through chromedp: the page's script against the
// server's rendering (livepage_test.go), a running daemon's page
// (daemon_test.go) and the page under `portcullis demo --attack`
// (demo_test.go).
//
// It is a Go module of its own, as caddy/ is, so that chromedp and the
// Chrome DevTools protocol stay out of the module graph of a program that
// imports Portcullis's library packages: the root module's go.mod never
// requires them. It may import the root module's internal packages, since
// Go's internal rule is by import path, and it replaces the root module
// with the checkout it sits in (../). Run its tests with
// `cd browser && go test ./...`; .ci/run does.
//
// Without Chromium each test skips, or fails when the environment variable
// CI is set (see browser/internal/browsertest).
package browser

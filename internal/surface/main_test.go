package main

import (
	"os"
	"path/filepath"
	"testing"
)

// An exported alias of a type under internal/ counts the methods users
// call through it; an alias of a public type adds only its own name.
func TestAnAliasOfAnInternalTypeCountsItsMethods(t *testing.T) {
	root := t.TempDir()
	write := func(path, body string) {
		t.Helper()
		path = filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("internal/store/store.go", `package store

type Cap struct{}

func (Cap) Validate() error   { return nil }
func (*Cap) Left() float64     { return 0 }
func (Cap) hidden()            {}
`)
	write("pub/pub.go", `package pub

type Thing struct{}

func (Thing) Do() {}
`)
	write("api/api.go", `package api

import (
	"example.com/m/internal/store"
	other "example.com/m/pub"
)

type Cap = store.Cap

type Thing = other.Thing
`)
	names, _, err := count(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names["api"], 2+2; got != want {
		t.Errorf("api: %d names, want %d (Cap and Thing, and Cap's two exported methods)", got, want)
	}
	if got, want := names["pub"], 2; got != want {
		t.Errorf("pub: %d names, want %d", got, want)
	}
}

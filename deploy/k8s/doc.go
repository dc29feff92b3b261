// Package k8s has no code of its own: its tests check the Kubernetes
// manifests beside it (kustomization.yaml and the files it lists) without a
// cluster. It is a module of its own so that k8s.io/api and kustomize stay
// out of agentsaga's go.mod; `make test` runs it.
package k8s

package main

import "runtime/debug"

// moduleVersions names the Kubernetes modules this binary was linked with.
func moduleVersions() map[string]string {
	out := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = info.GoVersion
	for _, dep := range info.Deps {
		switch dep.Path {
		case "k8s.io/dynamic-resource-allocation", "k8s.io/api", "k8s.io/apiserver", "github.com/google/cel-go", "cel.dev/cel-go":
			out[dep.Path] = dep.Version
		}
	}
	return out
}

//go:build !(k8s1_34 || k8s1_35)

package main

import dracel "k8s.io/dynamic-resource-allocation/cel"

// celFeatures: the CEL environment's features as kube-scheduler's cache and the API server's
// validation fill them (1.36 on: DRAListTypeAttributes too).
func celFeatures(g map[string]bool) dracel.Features {
	return dracel.Features{
		EnableConsumableCapacity: g["DRAConsumableCapacity"],
		EnableListTypeAttributes: g["DRAListTypeAttributes"],
	}
}

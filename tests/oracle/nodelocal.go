//go:build !k8s1_34

package main

import (
	"errors"

	"k8s.io/dynamic-resource-allocation/structured"
)

// nodeLocal: an error that kube-scheduler reports as this node being unschedulable, not as a
// failure of the scheduling attempt (structured.ErrFailedAllocationOnNode, from 1.35).
func nodeLocal(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) }

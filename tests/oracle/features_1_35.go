//go:build k8s1_35

package main

import (
	"errors"

	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// As kube-scheduler 1.35 fills them; DRAResourceClaimDeviceStatus is on by default there.
func allocatorFeatures(g map[string]bool) structured.Features {
	return structured.Features{
		AdminAccess:            g["DRAAdminAccess"],
		PrioritizedList:        g["DRAPrioritizedList"],
		PartitionableDevices:   g["DRAPartitionableDevices"],
		DeviceTaints:           g["DRADeviceTaints"],
		DeviceBindingAndStatus: g["DRADeviceBindingConditions"],
		ConsumableCapacity:     g["DRAConsumableCapacity"],
	}
}

func celCacheFeatures(g map[string]bool) dracel.Features {
	return dracel.Features{EnableConsumableCapacity: g["DRAConsumableCapacity"]}
}

func celCompilerFeatures(g map[string]bool) dracel.Features { return celCacheFeatures(g) }

// nodeLocal: an error that kube-scheduler reports as this node being unschedulable, not as a
// failure of the scheduling attempt (structured.ErrFailedAllocationOnNode).
func nodeLocal(err error) bool { return errors.Is(err, structured.ErrFailedAllocationOnNode) }

//go:build k8s1_34

package main

import (
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// As kube-scheduler 1.34 fills them (pkg/scheduler/framework/plugins/dynamicresources); the
// DRAResourceClaimDeviceStatus gate is beta and on by default there.
func allocatorFeatures(g map[string]bool) structured.Features {
	return structured.Features{
		AdminAccess:          g["DRAAdminAccess"],
		PrioritizedList:      g["DRAPrioritizedList"],
		PartitionableDevices: g["DRAPartitionableDevices"],
		DeviceTaints:         g["DRADeviceTaints"],
		DeviceBinding:        g["DRADeviceBindingConditions"],
		DeviceStatus:         true,
		ConsumableCapacity:   g["DRAConsumableCapacity"],
	}
}

func celCacheFeatures(g map[string]bool) dracel.Features {
	return dracel.Features{EnableConsumableCapacity: g["DRAConsumableCapacity"]}
}

func celCompilerFeatures(g map[string]bool) dracel.Features { return celCacheFeatures(g) }

// nodeLocal: 1.34 has no error that fails only one node; every error aborts scheduling.
func nodeLocal(error) bool { return false }

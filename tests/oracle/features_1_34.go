//go:build k8s1_34

package main

import (
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

// nodeLocal: 1.34 has no error that fails only one node; every error aborts scheduling.
func nodeLocal(error) bool { return false }

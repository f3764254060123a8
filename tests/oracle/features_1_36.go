//go:build k8s1_36

package main

import (
	"k8s.io/dynamic-resource-allocation/structured"
)

// As kube-scheduler 1.36 fills them; DRAResourceClaimDeviceStatus is on by default there.
func allocatorFeatures(g map[string]bool) structured.Features {
	return structured.Features{
		AdminAccess:            g["DRAAdminAccess"],
		PrioritizedList:        g["DRAPrioritizedList"],
		PartitionableDevices:   g["DRAPartitionableDevices"],
		DeviceTaints:           g["DRADeviceTaints"],
		DeviceBindingAndStatus: g["DRADeviceBindingConditions"],
		ConsumableCapacity:     g["DRAConsumableCapacity"],
		ListTypeAttributes:     g["DRAListTypeAttributes"],
	}
}

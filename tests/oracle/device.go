package main

import (
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// celDevice is the device as the allocator hands it to a selector.
func celDevice(driver string, d *resourceapi.Device) dracel.Device {
	return dracel.Device{Driver: driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
}

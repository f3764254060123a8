package main

import (
	"context"
	"time"

	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// benchAllocate times what kube-scheduler runs for one pod: NewAllocator over the cluster, then
// Allocate on every node. The first run is cold (a fresh CEL cache: every selector compiled);
// the others reuse nothing but the process. Decoding the case is not timed.
func benchAllocate(req *request) answer {
	out := answer{ID: req.ID}
	classes := classLister{}
	for _, c := range req.Classes {
		classes[c.Name] = c
	}
	features := allocatorFeatures(req.Gates)
	state := allocatedState(req.Allocated, req.Gates["DRAConsumableCapacity"])
	runs := max(1, req.Repeat)
	var cold, warm time.Duration
	fits := 0
	for run := 0; run < runs; run++ {
		ctx := context.Background()
		started := time.Now()
		allocator, err := structured.NewAllocator(ctx, features, state, classes, req.Slices, dracel.NewCache(10, celCacheFeatures(req.Gates)))
		if err != nil {
			out.Error = "new allocator: " + err.Error()
			return out
		}
		fits = 0
		for _, node := range req.Nodes {
			results, err := allocator.Allocate(ctx, node, req.Claims)
			if err == nil && len(results) == len(req.Claims) {
				fits++
			}
		}
		elapsed := time.Since(started)
		if run == 0 {
			cold = elapsed
		} else if warm == 0 || elapsed < warm {
			warm = elapsed
		}
	}
	if warm == 0 {
		warm = cold
	}
	n := max(1, len(req.Nodes))
	out.Bench = &benchResult{ColdNS: float64(cold.Nanoseconds()) / float64(n), WarmNS: float64(warm.Nanoseconds()) / float64(n), Fits: fits}
	return out
}

// benchCEL times DeviceMatches of one selector over devices: cold is the compile and the first
// pass, warm the best later pass; both per device.
func benchCEL(req *request) answer {
	out := answer{ID: req.ID}
	runs := max(2, req.Repeat)
	devices := make([]dracel.Device, len(req.Devices))
	for i := range req.Devices {
		devices[i] = celDevice(req.Driver, &req.Devices[i])
	}
	var cold, warm time.Duration
	matches := 0
	var compiled dracel.CompilationResult
	for run := 0; run < runs; run++ {
		started := time.Now()
		if run == 0 {
			compiled = dracel.GetCompiler(celCompilerFeatures(req.Gates)).CompileCELExpression(req.Expression, dracel.Options{DisableCostEstimation: true})
			if compiled.Error != nil {
				out.Error = "compile: " + compiled.Error.Detail
				return out
			}
		}
		matches = 0
		ctx := context.Background()
		for _, d := range devices {
			ok, _, err := compiled.DeviceMatches(ctx, d)
			if err == nil && ok {
				matches++
			}
		}
		elapsed := time.Since(started)
		if run == 0 {
			cold = elapsed
		} else if warm == 0 || elapsed < warm {
			warm = elapsed
		}
	}
	n := max(1, len(devices))
	out.Bench = &benchResult{ColdNS: float64(cold.Nanoseconds()) / float64(n), WarmNS: float64(warm.Nanoseconds()) / float64(n), Fits: matches}
	return out
}

type benchResult struct {
	ColdNS float64 `json:"coldNS"`
	WarmNS float64 `json:"warmNS"`
	// Fits: nodes where the claims fit (allocate), devices that match (cel).
	Fits int `json:"fits"`
}

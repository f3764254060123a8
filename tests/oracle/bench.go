package main

import (
	"context"
	"time"

	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// timeRuns runs once `runs` times: the first run's time is cold, the best later one warm (the
// cold one when there is no later run).
func timeRuns(runs int, once func(run int) error) (cold, warm time.Duration, err error) {
	for run := 0; run < runs; run++ {
		started := time.Now()
		if err := once(run); err != nil {
			return 0, 0, err
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
	return cold, warm, nil
}

func perItem(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(max(1, n)) }

// benchAllocate times what kube-scheduler runs for one pod: NewAllocator over the cluster, then
// Allocate on every node. The first run is cold (a fresh CEL cache: every selector compiled);
// the others reuse nothing but the process. Decoding the case is not timed.
func benchAllocate(req *request) answer {
	out := answer{ID: req.ID}
	fits := 0
	cold, warm, err := timeRuns(max(1, req.Repeat), func(int) error {
		ctx := context.Background()
		allocator, err := newAllocator(ctx, req)
		if err != nil {
			return err
		}
		fits = 0
		for _, node := range req.Nodes {
			results, err := allocator.Allocate(ctx, node, req.Claims)
			if err == nil && len(results) == len(req.Claims) {
				fits++
			}
		}
		return nil
	})
	if err != nil {
		out.Error = "new allocator: " + err.Error()
		return out
	}
	out.Bench = &benchResult{ColdNS: perItem(cold, len(req.Nodes)), WarmNS: perItem(warm, len(req.Nodes)), Fits: fits}
	return out
}

// benchCEL times DeviceMatches of one selector over devices: cold is the compile and the first
// pass, warm the best later pass; both per device.
func benchCEL(req *request) answer {
	out := answer{ID: req.ID}
	devices := make([]dracel.Device, len(req.Devices))
	for i := range req.Devices {
		devices[i] = celDevice(req.Driver, &req.Devices[i])
	}
	matches := 0
	var compiled dracel.CompilationResult
	cold, warm, err := timeRuns(max(2, req.Repeat), func(run int) error {
		if run == 0 {
			compiled = dracel.GetCompiler(celFeatures(req.Gates)).CompileCELExpression(req.Expression, dracel.Options{DisableCostEstimation: true})
			if compiled.Error != nil {
				return compiled.Error
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
		return nil
	})
	if err != nil {
		out.Error = "compile: " + err.Error()
		return out
	}
	out.Bench = &benchResult{ColdNS: perItem(cold, len(devices)), WarmNS: perItem(warm, len(devices)), Fits: matches}
	return out
}

type benchResult struct {
	ColdNS float64 `json:"coldNS"`
	WarmNS float64 `json:"warmNS"`
	// Fits: nodes where the claims fit (allocate), devices that match (cel).
	Fits int `json:"fits"`
}

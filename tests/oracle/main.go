// Command oracle answers DRA questions with Kubernetes' own code: the structured-parameters
// allocator of k8s.io/dynamic-resource-allocation (what kube-scheduler runs) and its CEL
// environment. It reads one JSON case per line on stdin and writes one JSON answer per line on
// stdout, in order, until stdin closes. The Kubernetes version is chosen at build time with a
// modfile (go.<minor>.mod) and the matching build tag (k8s1_<minor>); see build.py.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// request is one case. Kind "allocate" asks the allocator, "cel" the CEL environment,
// "version" which module versions this binary was built against.
type request struct {
	ID    any             `json:"id"`
	Kind  string          `json:"kind"`
	Gates map[string]bool `json:"gates"`

	// allocate
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Allocated []*resourceapi.ResourceClaim `json:"allocated"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Nodes     []*v1.Node                   `json:"nodes"`
	TimeoutMS int                          `json:"timeoutMS"`
	// Repeat runs each node's allocation this many times and reports every distinct outcome:
	// before 1.36 the allocator visits pools in Go map order, so its answer is one of several.
	Repeat int `json:"repeat"`

	// cel
	Expression string              `json:"expression"`
	Driver     string              `json:"driver"`
	Device     *resourceapi.Device `json:"device"`
	// celbench: the devices to evaluate over
	Devices []resourceapi.Device `json:"devices"`
	// NewExpressions compiles as for a create (the stricter environment), else as stored.
	NewExpressions bool `json:"newExpressions"`
}

type deviceResult struct {
	Request           string                                          `json:"request"`
	Driver            string                                          `json:"driver"`
	Pool              string                                          `json:"pool"`
	Device            string                                          `json:"device"`
	AdminAccess       bool                                            `json:"adminAccess,omitempty"`
	Shared            bool                                            `json:"shared,omitempty"`
	ConsumedCapacity  map[resourceapi.QualifiedName]resource.Quantity `json:"consumedCapacity,omitempty"`
	BindingConditions []string                                        `json:"bindingConditions,omitempty"`
}

type claimResult struct {
	Claim   string         `json:"claim"`
	Devices []deviceResult `json:"devices"`
}

type nodeAnswer struct {
	Node string `json:"node"`
	outcome
	// Others: the distinct outcomes of the repeated runs besides the first.
	Others []outcome `json:"others,omitempty"`
}

type outcome struct {
	// Satisfiable: the allocator returned one result per claim. Error: it failed (fatal for
	// the scheduler). Neither: the claims do not fit on this node.
	Satisfiable bool   `json:"satisfiable"`
	Error       string `json:"error,omitempty"`
	// Unschedulable: an error kube-scheduler takes as this node not fitting (not fatal).
	Unschedulable string `json:"unschedulable,omitempty"`
	// Panic: upstream's allocator panicked on this node (kube-scheduler would crash); no answer.
	Panic  string        `json:"panic,omitempty"`
	Claims []claimResult `json:"claims,omitempty"`
}

type answer struct {
	ID    any    `json:"id"`
	Error string `json:"error,omitempty"` // the case itself could not be run
	// allocate
	Nodes []nodeAnswer `json:"nodes,omitempty"`
	// cel
	CompileError     string  `json:"compileError,omitempty"`
	CompileErrorType string  `json:"compileErrorType,omitempty"`
	Matches          *bool   `json:"matches,omitempty"`
	RuntimeError     string  `json:"runtimeError,omitempty"`
	Cost             *uint64 `json:"cost,omitempty"`
	CostLimit        uint64  `json:"costLimit,omitempty"`
	// version
	Versions map[string]string `json:"versions,omitempty"`
	// bench, celbench
	Bench *benchResult `json:"bench,omitempty"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("device class %s does not exist", name)
}

// allocatedState is what kube-scheduler's claim tracker gathers (GatherAllocatedState and
// foreachAllocatedDevice in pkg/scheduler/framework/plugins/dynamicresources): results with
// admin access hold nothing; with DRAConsumableCapacity a result with a shareID holds its share
// and the capacity it consumed, not the whole device.
func allocatedState(claims []*resourceapi.ResourceClaim, consumable bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumable && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// newAllocator is what kube-scheduler's PreFilter builds for a pod: the version's features, the
// allocated state, the classes, every slice and a fresh CEL cache.
func newAllocator(ctx context.Context, req *request) (structured.Allocator, error) {
	classes := classLister{}
	for _, c := range req.Classes {
		classes[c.Name] = c
	}
	state := allocatedState(req.Allocated, req.Gates["DRAConsumableCapacity"])
	return structured.NewAllocator(ctx, allocatorFeatures(req.Gates), state, classes, req.Slices, dracel.NewCache(10, celFeatures(req.Gates)))
}

func allocate(req *request) answer {
	out := answer{ID: req.ID}
	ctx := context.Background()
	allocator, err := newAllocator(ctx, req)
	if err != nil {
		out.Error = "new allocator: " + err.Error()
		return out
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	for _, node := range req.Nodes {
		na := nodeAnswer{Node: node.Name}
		seen := map[string]bool{}
		for run := 0; run < max(1, req.Repeat); run++ {
			o := runOnce(ctx, timeout, allocator, node, req.Claims)
			key, _ := json.Marshal(o)
			if seen[string(key)] {
				continue
			}
			seen[string(key)] = true
			if run == 0 {
				na.outcome = o
			} else {
				na.Others = append(na.Others, o)
			}
		}
		out.Nodes = append(out.Nodes, na)
	}
	return out
}

func runOnce(ctx context.Context, timeout time.Duration, allocator structured.Allocator, node *v1.Node, claims []*resourceapi.ResourceClaim) outcome {
	var na outcome
	results, err := allocateOnNode(ctx, timeout, allocator, node, claims, &na)
	{
		switch {
		case na.Panic != "":
		case err != nil && nodeLocal(err):
			na.Unschedulable = err.Error()
		case err != nil:
			na.Error = err.Error()
		case len(results) == len(claims):
			na.Satisfiable = true
			for i, result := range results {
				cr := claimResult{Claim: claims[i].Namespace + "/" + claims[i].Name, Devices: []deviceResult{}}
				for _, r := range result.Devices.Results {
					cr.Devices = append(cr.Devices, deviceResult{
						Request:           r.Request,
						Driver:            r.Driver,
						Pool:              r.Pool,
						Device:            r.Device,
						AdminAccess:       r.AdminAccess != nil && *r.AdminAccess,
						Shared:            r.ShareID != nil,
						ConsumedCapacity:  r.ConsumedCapacity,
						BindingConditions: r.BindingConditions,
					})
				}
				na.Claims = append(na.Claims, cr)
			}
		}
	}
	return na
}

func allocateOnNode(ctx context.Context, timeout time.Duration, allocator structured.Allocator, node *v1.Node, claims []*resourceapi.ResourceClaim, na *outcome) (results []resourceapi.AllocationResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			na.Panic = fmt.Sprint(r)
		}
	}()
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return allocator.Allocate(nctx, node, claims)
}

// celCase compiles like the API server's validation (cost estimated against the selector
// limit) and evaluates like the allocator (the device converted as the allocator does).
func celCase(req *request) answer {
	out := answer{ID: req.ID, CostLimit: resourceapi.CELSelectorExpressionMaxCost}
	envType := environment.StoredExpressions
	if req.NewExpressions {
		envType = environment.NewExpressions
	}
	compiler := dracel.GetCompiler(celFeatures(req.Gates))
	result := compiler.CompileCELExpression(req.Expression, dracel.Options{EnvType: &envType})
	if result.Error != nil {
		out.CompileError = result.Error.Detail
		out.CompileErrorType = string(result.Error.Type)
		return out
	}
	cost := result.MaxCost
	out.Cost = &cost
	if req.Device == nil {
		return out
	}
	matches, _, err := result.DeviceMatches(context.Background(), celDevice(req.Driver, req.Device))
	if err != nil {
		out.RuntimeError = err.Error()
		return out
	}
	out.Matches = &matches
	return out
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 256<<20)
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		var req request
		var out answer
		if err := json.Unmarshal(line, &req); err != nil {
			out = answer{Error: "decode: " + err.Error()}
		} else {
			switch req.Kind {
			case "allocate":
				out = allocate(&req)
			case "cel":
				out = celCase(&req)
			case "bench":
				out = benchAllocate(&req)
			case "celbench":
				out = benchCEL(&req)
			case "version":
				out = answer{ID: req.ID, Versions: moduleVersions()}
			default:
				out = answer{ID: req.ID, Error: fmt.Sprintf("unknown kind %q (allocate, cel, bench, celbench, version)", req.Kind)}
			}
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "oracle: encode:", err)
			os.Exit(1)
		}
		if err := w.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "oracle: read:", err)
		os.Exit(1)
	}
}

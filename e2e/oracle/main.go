// drasat-oracle answers, with Kubernetes' own code (k8s.io/dynamic-resource-allocation v0.37.2),
// what kube-scheduler's DRA allocator would decide, so drasat's tests can compare drasat's
// answers with upstream's on many random cases (tests/oracle).
//
// It reads one JSON request per line on stdin and writes one JSON answer per line on stdout, in
// order, so one process serves a whole test session. Operations:
//
//	{"op":"cel","expression":E,"devices":[{"driver":D,"device":<v1 Device>}...]}
//	  -> {"compiles":bool,"compileError":S,"results":[{"match":bool}|{"error":S}...]}
//	  each device evaluated as the allocator evaluates a selector (selectorsMatch: the cached
//	  compilation, cel.Device from the v1 Device, runtime errors through EnhanceRuntimeError).
//	{"op":"allocate","node":N,"slices":[...],"classes":[...],"claim":C,"allocated":[...]}
//	  -> {"allocated":bool,"allocation":<v1 AllocationResult>,"error":S,"failedOnNode":bool}
//	  the structured allocator on node N for one claim, with the devices the "allocated"
//	  AllocationResults hold (as the scheduler's claim tracker counts them) in use. "error" is
//	  a fatal error (a CEL runtime error on some device, a bad request): the scheduler then
//	  fails the pod's scheduling attempt, the claim is not allocated.
//	  With "claims":[C...] instead of "claim": a pod's claims together, as kube-scheduler
//	  allocates them on one node (all or none); the answer has "allocations", one per claim.
//	{"op":"validate", ...allocate's fields..., "allocation":<v1 AllocationResult>}
//	  -> {"valid":bool,"reason":S}
//	  whether upstream accepts that allocation for the claim: the allocator is run with every
//	  ExactCount request (and the chosen firstAvailable subrequest, the others removed)
//	  limited to the devices the allocation gives it, through a device-name attribute the
//	  oracle adds; an All request keeps every device (its result must be all of them). Valid
//	  when upstream then allocates, with the same devices per request and the same consumed
//	  capacity, share IDs where it sets them, the same tolerations, and the same node selector.
//
// A malformed line gets {"error": "..."} with "bad request" in it; the process goes on.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// The allocator features of a v1.37 kube-scheduler with default feature gates
// (pkg/scheduler/framework/plugins/dynamicresources.AllocatorFeatures): GA and beta-on gates.
var features = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}

// As kube-scheduler creates its cache (dynamicresources.New), larger so that a session's
// expressions stay compiled.
var celCache = cel.NewCache(1000, cel.Features{EnableConsumableCapacity: true})

// The attribute validate adds to every device to limit a request to named devices.
const nameDomain = "oracle.drasat.io"

type request struct {
	Op         string                         `json:"op"`
	Expression string                         `json:"expression"`
	Devices    []celDevice                    `json:"devices"`
	Node       string                         `json:"node"`
	NodeLabels map[string]string              `json:"nodeLabels"`
	Slices     []resourceapi.ResourceSlice    `json:"slices"`
	Classes    []resourceapi.DeviceClass      `json:"classes"`
	Claim      *resourceapi.ResourceClaim     `json:"claim"`
	Claims     []*resourceapi.ResourceClaim   `json:"claims"`
	Allocated  []resourceapi.AllocationResult `json:"allocated"`
	Allocation *resourceapi.AllocationResult  `json:"allocation"`
}

type celDevice struct {
	Driver string             `json:"driver"`
	Device resourceapi.Device `json:"device"`
}

type celResult struct {
	Match *bool  `json:"match,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 256<<20)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for in.Scan() {
		line := in.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if err := encoder.Encode(answer(line)); err != nil {
			fmt.Fprintf(os.Stderr, "drasat-oracle: write: %v\n", err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			fmt.Fprintf(os.Stderr, "drasat-oracle: write: %v\n", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "drasat-oracle: read: %v\n", err)
		os.Exit(1)
	}
}

func answer(line []byte) (result any) {
	defer func() {
		if r := recover(); r != nil {
			result = map[string]any{"error": fmt.Sprintf("panic: %v", r)}
		}
	}()
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return map[string]any{"error": fmt.Sprintf("bad request: %v", err)}
	}
	switch req.Op {
	case "cel":
		return evaluate(req)
	case "allocate":
		if (req.Claim == nil) == (len(req.Claims) == 0) {
			return map[string]any{"error": "bad request: allocate needs a claim or claims (one of them)"}
		}
		if req.Claim != nil {
			return allocate(req, req.Slices, req.Claim)
		}
		for i, claim := range req.Claims {
			if claim == nil {
				return map[string]any{"error": fmt.Sprintf("bad request: claims[%d] is null", i)}
			}
		}
		return allocateAll(req, req.Slices, req.Claims)
	case "validate":
		if req.Claim == nil || req.Allocation == nil {
			return map[string]any{"error": "bad request: validate needs a claim and an allocation"}
		}
		return validate(req)
	default:
		return map[string]any{"error": fmt.Sprintf("bad request: unknown op %q", req.Op)}
	}
}

// evaluate mirrors the allocator's selectorsMatch for one selector on each device.
func evaluate(req request) map[string]any {
	expr := celCache.GetOrCompile(req.Expression)
	if expr.Error != nil {
		return map[string]any{"compiles": false, "compileError": expr.Error.Error()}
	}
	results := make([]celResult, len(req.Devices))
	for i, d := range req.Devices {
		matches, _, err := expr.DeviceMatches(context.Background(), cel.Device{
			Driver:                   d.Driver,
			AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
			Attributes:               d.Device.Attributes,
			Capacity:                 d.Device.Capacity,
		})
		if err != nil {
			results[i] = celResult{Error: cel.EnhanceRuntimeError(err).Error()}
		} else {
			results[i] = celResult{Match: ptr.To(matches)}
		}
	}
	return map[string]any{"compiles": true, "results": results}
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, class := range c {
		out = append(out, class)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := c[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

// allocatedState counts allocation results as the scheduler's claim tracker does
// (foreachAllocatedDevice with DRAConsumableCapacity on).
func allocatedState(results []resourceapi.AllocationResult) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, allocation := range results {
		for _, result := range allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.ShareID != nil {
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

func allocate(req request, slices []resourceapi.ResourceSlice, claim *resourceapi.ResourceClaim) map[string]any {
	answer := allocateAll(req, slices, []*resourceapi.ResourceClaim{claim})
	if allocations, ok := answer["allocations"].([]resourceapi.AllocationResult); ok {
		delete(answer, "allocations")
		answer["allocation"] = allocations[0]
	}
	return answer
}

// allocateAll: the claims of one pod on one node, as kube-scheduler's Filter allocates them.
func allocateAll(req request, slices []resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) map[string]any {
	ctx := context.Background()
	byName := classes{}
	for i := range req.Classes {
		byName[req.Classes[i].Name] = &req.Classes[i]
	}
	pointers := make([]*resourceapi.ResourceSlice, len(slices))
	for i := range slices {
		pointers[i] = &slices[i]
	}
	allocator, err := structured.NewAllocator(ctx, features, allocatedState(req.Allocated), byName, pointers, celCache)
	if err != nil {
		return map[string]any{"allocated": false, "error": err.Error()}
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: req.Node, Labels: req.NodeLabels}}
	results, err := allocator.Allocate(ctx, node, claims)
	if err != nil {
		return map[string]any{
			"allocated":    false,
			"error":        err.Error(),
			"failedOnNode": errors.Is(err, structured.ErrFailedAllocationOnNode),
		}
	}
	if len(results) == 0 {
		return map[string]any{"allocated": false}
	}
	return map[string]any{"allocated": true, "allocations": results}
}

type resultKey struct{ request, driver, pool, device string }

func keyOf(r resourceapi.DeviceRequestAllocationResult) resultKey {
	return resultKey{r.Request, r.Driver, r.Pool, r.Device}
}

func (k resultKey) String() string {
	return fmt.Sprintf("%s -> %s/%s/%s", k.request, k.driver, k.pool, k.device)
}

func invalid(format string, args ...any) map[string]any {
	return map[string]any{"valid": false, "reason": fmt.Sprintf(format, args...)}
}

// validate runs the allocator limited to the allocation's devices, per request (see the top).
func validate(req request) map[string]any {
	given := req.Allocation.Devices.Results
	claim := req.Claim.DeepCopy()

	// The devices each request (`req` or `req/sub`) was given, by device name; which
	// subrequest each firstAvailable request took.
	named := map[string][]string{}
	chosen := map[string]string{}
	for _, r := range given {
		named[r.Request] = append(named[r.Request], nameValue(r.Driver, r.Pool, r.Device))
		base, sub, found := strings.Cut(r.Request, "/")
		if found {
			if other, ok := chosen[base]; ok && other != sub {
				return invalid("request %s has results of two subrequests (%s and %s)", base, other, sub)
			}
			chosen[base] = sub
		}
	}
	limit := func(name string, mode resourceapi.DeviceAllocationMode, selectors []resourceapi.DeviceSelector) []resourceapi.DeviceSelector {
		if mode == resourceapi.DeviceAllocationModeAll {
			return selectors
		}
		quoted := make([]string, len(named[name]))
		for i, n := range named[name] {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		// First, so that selectors are evaluated only on the devices given, as they were when
		// this allocation was made.
		expression := fmt.Sprintf("device.attributes[%q].name in [%s]", nameDomain, strings.Join(quoted, ", "))
		return append([]resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}}, selectors...)
	}
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			r.Exactly.Selectors = limit(r.Name, r.Exactly.AllocationMode, r.Exactly.Selectors)
			continue
		}
		sub, ok := chosen[r.Name]
		if !ok {
			return invalid("request %s: no result names one of its subrequests", r.Name)
		}
		var kept []resourceapi.DeviceSubRequest
		for _, s := range r.FirstAvailable {
			if s.Name == sub {
				s.Selectors = limit(r.Name+"/"+s.Name, s.AllocationMode, s.Selectors)
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			return invalid("request %s has no subrequest %s", r.Name, sub)
		}
		r.FirstAvailable = kept
	}

	slices := make([]resourceapi.ResourceSlice, len(req.Slices))
	for i := range req.Slices {
		slice := req.Slices[i].DeepCopy()
		for j := range slice.Spec.Devices {
			d := &slice.Spec.Devices[j]
			attributes := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(d.Attributes)+1)
			for k, v := range d.Attributes {
				attributes[k] = v
			}
			attributes[resourceapi.QualifiedName(nameDomain+"/name")] = resourceapi.DeviceAttribute{
				StringValue: ptr.To(nameValue(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)),
			}
			d.Attributes = attributes
		}
		slices[i] = *slice
	}

	upstream := allocate(req, slices, claim)
	if message, ok := upstream["error"].(string); ok {
		return invalid("upstream fails the claim on these devices: %s", message)
	}
	if upstream["allocated"] != true {
		return invalid("upstream cannot allocate the claim on these devices")
	}
	theirAllocation := upstream["allocation"].(resourceapi.AllocationResult)
	theirs := theirAllocation.Devices.Results
	mineSelector, _ := json.Marshal(req.Allocation.NodeSelector)
	theirSelector, _ := json.Marshal(theirAllocation.NodeSelector)
	if string(mineSelector) != string(theirSelector) {
		return invalid("nodeSelector %s, upstream %s", mineSelector, theirSelector)
	}
	mine := map[resultKey]resourceapi.DeviceRequestAllocationResult{}
	for _, r := range given {
		if _, twice := mine[keyOf(r)]; twice {
			return invalid("%s is listed twice", keyOf(r))
		}
		mine[keyOf(r)] = r
	}
	var missing []string
	for _, r := range theirs {
		m, ok := mine[keyOf(r)]
		if !ok {
			missing = append(missing, keyOf(r).String())
			continue
		}
		delete(mine, keyOf(r))
		if reason := compareResult(m, r); reason != "" {
			return invalid("%s: %s", keyOf(r), reason)
		}
	}
	var extra []string
	for k := range mine {
		extra = append(extra, k.String())
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		return invalid("upstream's results differ: missing %v, not upstream's %v", missing, extra)
	}
	return map[string]any{"valid": true}
}

func nameValue(driver, pool, device string) string {
	return driver + "/" + pool + "/" + device
}

// compareResult: what upstream writes for a device that the given result lacks or has otherwise.
func compareResult(mine, theirs resourceapi.DeviceRequestAllocationResult) string {
	if (mine.ShareID == nil) != (theirs.ShareID == nil) {
		return fmt.Sprintf("shareID set: %v, upstream: %v", mine.ShareID != nil, theirs.ShareID != nil)
	}
	if len(mine.ConsumedCapacity) != len(theirs.ConsumedCapacity) {
		return fmt.Sprintf("consumedCapacity %v, upstream %v", quantities(mine.ConsumedCapacity), quantities(theirs.ConsumedCapacity))
	}
	for name, q := range theirs.ConsumedCapacity {
		m, ok := mine.ConsumedCapacity[name]
		if !ok || m.Cmp(q) != 0 {
			return fmt.Sprintf("consumedCapacity %v, upstream %v", quantities(mine.ConsumedCapacity), quantities(theirs.ConsumedCapacity))
		}
	}
	a, _ := json.Marshal(mine.Tolerations)
	b, _ := json.Marshal(theirs.Tolerations)
	if string(a) != string(b) && !(len(mine.Tolerations) == 0 && len(theirs.Tolerations) == 0) {
		return fmt.Sprintf("tolerations %s, upstream %s", a, b)
	}
	return ""
}

func quantities(m map[resourceapi.QualifiedName]resource.Quantity) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[string(k)] = v.String()
	}
	return out
}

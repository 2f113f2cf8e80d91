// Command fakecri is the container runtime of drasat's real-kubelet tests: the CRI RuntimeService
// and ImageService on a unix socket, served from the in-memory fakes of k8s.io/cri-api
// (k8s.io/cri-client/pkg/fake), so a real kubelet runs pods without running anything.
//
// Sandboxes are ready and started containers running at once; images "pull" instantly. Every
// CreateContainer request is appended to the record file as one JSON line (the pod, the
// container, the CDI devices, the environment, device nodes, mounts and annotations the kubelet
// put in it): the tests read from it what a real runtime would have been asked to give the
// container. The state lives as long as this process, so a kubelet restarted against the same
// socket finds its pods still running, as on a node.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// created is one CreateContainer request as the tests read it.
type created struct {
	Time        string            `json:"time"`
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	PodUID      string            `json:"podUID"`
	Container   string            `json:"container"`
	Attempt     uint32            `json:"attempt"`
	ContainerID string            `json:"containerID"`
	CDIDevices  []string          `json:"cdiDevices"`
	Envs        map[string]string `json:"envs"`
	Devices     []string          `json:"devices"`
	Mounts      []string          `json:"mounts"`
	Annotations map[string]string `json:"annotations"`
}

// runtime is the upstream fake with CreateContainer recorded; everything else is the fake's.
type runtime struct {
	*fake.RemoteRuntime
	mu     sync.Mutex
	record *os.File
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	answer, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	config, sandbox := req.GetConfig(), req.GetSandboxConfig()
	// The container's log path, as a real runtime reports it. The upstream fake leaves it empty,
	// and the kubelet removes a deleted container's logs by globbing "<log path>*": with an
	// empty path, every file in the kubelet's working directory.
	r.RuntimeService.Lock()
	if held, ok := r.RuntimeService.Containers[answer.GetContainerId()]; ok {
		held.LogPath = filepath.Join(sandbox.GetLogDirectory(), config.GetLogPath())
	}
	r.RuntimeService.Unlock()
	entry := created{
		Time:        time.Now().UTC().Format(time.RFC3339Nano),
		Namespace:   sandbox.GetMetadata().GetNamespace(),
		Pod:         sandbox.GetMetadata().GetName(),
		PodUID:      sandbox.GetMetadata().GetUid(),
		Container:   config.GetMetadata().GetName(),
		Attempt:     config.GetMetadata().GetAttempt(),
		ContainerID: answer.GetContainerId(),
		CDIDevices:  []string{},
		Envs:        map[string]string{},
		Devices:     []string{},
		Mounts:      []string{},
		Annotations: config.GetAnnotations(),
	}
	for _, device := range config.GetCDIDevices() {
		entry.CDIDevices = append(entry.CDIDevices, device.GetName())
	}
	for _, env := range config.GetEnvs() {
		entry.Envs[env.GetKey()] = string(env.GetValue())
	}
	for _, device := range config.GetDevices() {
		entry.Devices = append(entry.Devices, device.GetHostPath()+":"+device.GetContainerPath())
	}
	for _, mount := range config.GetMounts() {
		entry.Mounts = append(entry.Mounts, mount.GetHostPath()+":"+mount.GetContainerPath())
	}
	line, err := json.Marshal(entry)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.record.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("fakecri: recording the request: %w", err)
	}
	return answer, nil
}

func main() {
	socket := flag.String("socket", "", "the unix socket to serve CRI on (the kubelet's --container-runtime-endpoint)")
	record := flag.String("record", "", "the file each CreateContainer request is appended to, one JSON line each")
	flag.Parse()
	if *socket == "" || *record == "" {
		fmt.Fprintln(os.Stderr, "usage: fakecri --socket PATH --record FILE")
		os.Exit(2)
	}
	out, err := os.OpenFile(*record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
	upstream := fake.NewFakeRemoteRuntime()
	// The kubelet refuses an image without a size; every "pulled" image has this one.
	upstream.ImageService.SetFakeImageSize(1 << 20)
	// The kubelet takes its cgroup driver from the runtime (KubeletCgroupDriverFromCRI).
	upstream.RuntimeService.FakeLinuxConfiguration = &kubeapi.LinuxRuntimeConfiguration{
		CgroupDriver: kubeapi.CgroupDriver_CGROUPFS,
	}
	served := &runtime{RemoteRuntime: upstream, record: out}
	// The upstream fake registers itself; serve ours, whose CreateContainer records.
	server := newServer(served)
	if err := serve(server, *socket); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
	upstream.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{
		Conditions: []*kubeapi.RuntimeCondition{
			{Type: kubeapi.RuntimeReady, Status: true},
			{Type: kubeapi.NetworkReady, Status: true},
		},
	}
	fmt.Printf("fakecri: serving on %s, recording to %s\n", *socket, *record)
	// The fake keeps every call's name: forget them now and then (nothing reads them).
	go func() {
		for range time.Tick(time.Minute) {
			upstream.RuntimeService.Lock()
			upstream.RuntimeService.Called = nil
			upstream.RuntimeService.Unlock()
			upstream.ImageService.Lock()
			upstream.ImageService.Called = nil
			upstream.ImageService.Unlock()
		}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	server.Stop()
	_ = os.Remove(*socket)
}

func newServer(served *runtime) *grpc.Server {
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, served)
	kubeapi.RegisterImageServiceServer(server, served)
	return server
}

func serve(server *grpc.Server, socket string) error {
	listener, err := util.CreateListener("unix://" + socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", socket, err)
	}
	go func() { _ = server.Serve(listener) }()
	return nil
}

package job

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Host holds the facts about the machine that the SageMaker variables
// report. DetectHost finds them the way the training toolkit does; tests
// set them.
type Host struct {
	// Name is the job's host name on the container network (SM_CURRENT_HOST).
	Name string
	// NumCPUs is multiprocessing.cpu_count(): the CPUs online, not the
	// process's affinity mask.
	NumCPUs int
	// NumGPUs counts the lines of `nvidia-smi --list-gpus` starting "GPU ".
	NumGPUs int
	// NumNeurons sums nc_count over `neuron-ls -j`.
	NumNeurons int
	// NetworkInterface is the interface of the default route (resourceconfig.json's
	// network_interface_name).
	NetworkInterface string
	// SMDDPRun and SMDDPMPRun report whether smddprun and smddpmprun are on PATH.
	SMDDPRun, SMDDPMPRun bool
}

// DefaultHostName is SageMaker's name for the first (here: only) host.
const DefaultHostName = "algo-1"

// DetectHost inspects this machine. Every probe that fails gives the
// toolkit's own fallback (0 GPUs, 0 Neuron cores, eth0).
func DetectHost() Host {
	_, ddp := exec.LookPath("smddprun")
	_, ddpm := exec.LookPath("smddpmprun")
	return Host{
		Name:             DefaultHostName,
		NumCPUs:          onlineCPUs(),
		NumGPUs:          countGPUs(),
		NumNeurons:       countNeuronCores(),
		NetworkInterface: defaultRouteInterface(),
		SMDDPRun:         ddp == nil,
		SMDDPMPRun:       ddpm == nil,
	}
}

// onlineCPUs is what CPython's os.cpu_count() returns on Linux,
// sysconf(_SC_NPROCESSORS_ONLN), which glibc reads from
// /sys/devices/system/cpu/online ("0-3,6,8-9").
func onlineCPUs() int {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(data)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return runtime.NumCPU()
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return runtime.NumCPU()
			}
		}
		n += b - a + 1
	}
	if n == 0 {
		return runtime.NumCPU()
	}
	return n
}

// countGPUs runs `nvidia-smi --list-gpus` as the toolkit does
// (environment.num_gpus). Without nvidia-smi it counts the
// /dev/nvidia<N> device nodes instead, so a container given the devices
// but not the tool still reports them.
func countGPUs() int {
	if path, err := exec.LookPath("nvidia-smi"); err == nil {
		out, err := exec.Command(path, "--list-gpus").Output()
		if err != nil {
			return 0
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "GPU ") {
				n++
			}
		}
		return n
	}
	devs, _ := filepath.Glob("/dev/nvidia[0-9]*")
	n := 0
	for _, d := range devs {
		if _, err := strconv.Atoi(strings.TrimPrefix(d, "/dev/nvidia")); err == nil {
			n++
		}
	}
	return n
}

// countNeuronCores sums nc_count over `neuron-ls -j` (environment.num_neurons).
func countNeuronCores() int {
	path, err := exec.LookPath("neuron-ls")
	if err != nil {
		return 0
	}
	out, err := exec.Command(path, "-j").Output()
	if err != nil {
		return 0
	}
	var devs []struct {
		NCCount int `json:"nc_count"`
	}
	if json.Unmarshal(out, &devs) != nil {
		return 0
	}
	n := 0
	for _, d := range devs {
		n += d.NCCount
	}
	return n
}

// defaultRouteInterface is the interface of the IPv4 default route, or
// "eth0" (the toolkit's default when resourceconfig.json names none).
func defaultRouteInterface() string {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "eth0"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[1] == "00000000" && fields[0] != "Iface" {
			return fields[0]
		}
	}
	return "eth0"
}

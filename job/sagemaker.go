package job

import (
	"bytes"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// With compat sagemaker, mlfsd plays the SageMaker platform for one host:
// it writes resourceconfig.json and inputdataconfig.json next to
// hyperparameters.json, and sets the variables that
// sagemaker-training-toolkit (src/sagemaker_training/environment.py,
// Environment.to_env_vars, and mapping.py) derives from those files, with
// the toolkit's own typing and formatting. Line references below are to
// github.com/aws/sagemaker-training-toolkit at 33839372.

// SageMaker's names for the single instance group and instance type of a
// job that is not on SageMaker (the toolkit's local mode, environment.py:164).
const (
	smInstanceGroup = "homogeneousCluster"
	smInstanceType  = "local"
)

// smReservedHyperparameters are params.SAGEMAKER_HYPERPARAMETERS: taken out
// of the user's hyperparameters (as is every name starting "sagemaker_")
// and not passed on as framework parameters either.
var smReservedHyperparameters = map[string]bool{
	"sagemaker_program": true, "sagemaker_submit_directory": true,
	"sagemaker_enable_cloudwatch_metrics": true, "sagemaker_region": true,
	"sagemaker_container_log_level": true, "sagemaker_job_name": true,
	"default_user_module_name": true, "_tuning_objective_metric": true,
	"sagemaker_s3_output": true,
}

// smDistributionFlags turn on distribution over the instance group
// (environment.py, get_distribution_instance_groups_from_resource_config).
var smDistributionFlags = []string{
	"sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
	"sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled",
	"sagemaker_pytorch_xla_multi_worker_enabled",
	"sagemaker_multi_worker_mirrored_strategy_enabled", "sagemaker_torch_distributed_enabled",
}

// isSageMakerHyperparameter is mapping.split_by_criteria's test.
func isSageMakerHyperparameter(name string) bool {
	return smReservedHyperparameters[name] || strings.HasPrefix(name, "sagemaker_")
}

// pyUpper is Python's str.upper(): full Unicode case mapping (ß -> SS).
func pyUpper(s string) string { return cases.Upper(language.Und).String(s) }

// smHPVar is the variable of a hyperparameter: "SM_HP_" + name.upper(),
// nothing replaced (mapping.to_env_vars, format_key).
func smHPVar(name string) string { return "SM_HP_" + pyUpper(name) }

// smHyperparameters types every hyperparameter as the toolkit does
// (read_hyperparameters: json.loads, else the text) and splits them into
// the user's and SageMaker's own, both in spec order.
func (p *Plan) smHyperparameters() (user, sm *pyDict) {
	user, sm = newPyDict(), newPyDict()
	for _, hp := range p.Hyperparameters {
		v := pyLoadsOrString(hp.Value)
		if isSageMakerHyperparameter(hp.Name) {
			sm.set(hp.Name, v)
		} else {
			user.set(hp.Name, v)
		}
	}
	return user, sm
}

// ResourceConfigFile is <root>/input/config/resourceconfig.json.
func (p *Plan) ResourceConfigFile() string {
	return filepath.Join(p.ConfigDir(), "resourceconfig.json")
}

// InputDataConfigFile is <root>/input/config/inputdataconfig.json.
func (p *Plan) InputDataConfigFile() string {
	return filepath.Join(p.ConfigDir(), "inputdataconfig.json")
}

func (h Host) resourceConfig() *pyDict {
	group := newPyDict()
	group.set("instance_group_name", smInstanceGroup)
	group.set("instance_type", smInstanceType)
	group.set("hosts", pyList{h.Name})
	rc := newPyDict()
	rc.set("current_host", h.Name)
	rc.set("current_instance_type", smInstanceType)
	rc.set("current_group_name", smInstanceGroup)
	rc.set("hosts", pyList{h.Name})
	rc.set("instance_groups", pyList{group})
	rc.set("network_interface_name", h.NetworkInterface)
	return rc
}

func (p *Plan) inputDataConfig() *pyDict {
	idc := newPyDict()
	for _, c := range p.Inputs {
		ch := newPyDict()
		ch.set("TrainingInputMode", "File")
		ch.set("S3DistributionType", "FullyReplicated")
		ch.set("RecordWrapperType", "None")
		idc.set(c.Name, ch)
	}
	return idc
}

// ResourceConfigJSON is resourceconfig.json as SageMaker writes it for one
// host (the keys environment.py reads; written like json.dump).
func (p *Plan) ResourceConfigJSON(h Host) string {
	var b bytes.Buffer
	pyDefault.dump(&b, h.resourceConfig())
	return b.String()
}

// InputDataConfigJSON is inputdataconfig.json: every input channel in
// File mode, fully replicated, no record wrapping.
func (p *Plan) InputDataConfigJSON() string {
	var b bytes.Buffer
	pyDefault.dump(&b, p.inputDataConfig())
	return b.String()
}

// host is the plan's Host, or this machine's.
func (p *Plan) host() Host {
	if p.Host != nil {
		return *p.Host
	}
	return DetectHost()
}

// smVar is one SageMaker variable; aggregate marks the ones that grow with
// the hyperparameters and so may be left out when too long.
type smVar struct {
	Var
	aggregate bool
}

// sageMakerEnv is Environment().to_env_vars() (environment.py:998) for
// this plan on host h, in the toolkit's order, preceded by
// TRAINING_JOB_NAME, which the SageMaker platform sets.
//
// Known limit: a \ud800-style lone surrogate inside a JSON hyperparameter
// value becomes U+FFFD here, where Python keeps it.
func (p *Plan) sageMakerEnv(h Host) []smVar {
	user, sm := p.smHyperparameters()
	afp := newPyDict() // additional_framework_parameters
	for _, k := range sm.keys {
		if !smReservedHyperparameters[k] {
			afp.set(k, sm.vals[k])
		}
	}
	get := func(d *pyDict, k string, def pyValue) pyValue {
		if v, ok := d.get(k); ok {
			return v
		}
		return def
	}

	rc := h.resourceConfig()
	idc := p.inputDataConfig()
	hosts := pyList{h.Name}
	channels := newPyDict() // channel_input_dirs
	var names []string
	for _, c := range p.Inputs {
		channels.set(c.Name, p.InputDir(c))
		names = append(names, c.Name)
	}
	sortedNames := pyList{}
	for _, n := range sortStrings(names) {
		sortedNames = append(sortedNames, n)
	}

	var distGroups pyValue = pyList{}
	for _, f := range smDistributionFlags {
		if pyTruthy(get(afp, f, false)) {
			distGroups = pyList{smInstanceGroup}
			break
		}
	}
	distGroups = get(afp, "sagemaker_distribution_instance_groups", distGroups)
	distHosts := pyList{}
	if pyIn(smInstanceGroup, distGroups) {
		distHosts = append(distHosts, h.Name)
	}
	master := h.Name // distribution hosts, else hosts: both start with it

	program := get(sm, "sagemaker_program", nil)
	moduleName := strings.TrimSuffix(pyStr(program), ".py") // str(None) is "None"
	moduleDir := pyStr(get(sm, "sagemaker_submit_directory", p.WorkingDir()))
	logLevel := get(sm, "sagemaker_container_log_level", pyInt("20")) // logging.INFO

	group := rc.vals["instance_groups"].(pyList)[0]
	groupsDict := newPyDict()
	groupsDict.set(smInstanceGroup, group)

	inputDir := filepath.Join(p.Root, "input")
	outputDir := filepath.Join(p.Root, "output")
	modelDir := filepath.Join(outputDir, "model")
	outputDataDir := filepath.Join(outputDir, "data")
	intermediateDir := filepath.Join(outputDir, "intermediate")
	num := func(n int) pyValue { return pyInt(strconv.Itoa(n)) }

	// dict(self): every property of Environment (json.dumps sorts them).
	te := newPyDict()
	te.set("additional_framework_parameters", afp)
	te.set("channel_input_dirs", channels)
	te.set("current_host", h.Name)
	te.set("current_instance_group", smInstanceGroup)
	te.set("current_instance_group_hosts", pyList{h.Name})
	te.set("current_instance_type", smInstanceType)
	te.set("distribution_hosts", distHosts)
	te.set("distribution_instance_groups", distGroups)
	te.set("framework_module", nil) // $SAGEMAKER_TRAINING_MODULE: a framework container's
	te.set("hosts", hosts)
	te.set("hyperparameters", user)
	te.set("input_config_dir", p.ConfigDir())
	te.set("input_data_config", idc)
	te.set("input_dir", inputDir)
	te.set("instance_groups", pyList{smInstanceGroup})
	te.set("instance_groups_dict", groupsDict)
	te.set("is_hetero", false)
	te.set("is_master", master == h.Name)
	te.set("is_modelparallel_enabled", nil) // $SM_HP_MP_PARAMETERS and ...: None when unset
	te.set("is_smddpmprun_installed", h.SMDDPMPRun)
	te.set("is_smddprun_installed", h.SMDDPRun)
	te.set("job_name", p.Name)
	te.set("log_level", logLevel)
	te.set("master_hostname", master)
	te.set("model_dir", modelDir)
	te.set("module_dir", moduleDir)
	te.set("module_name", moduleName)
	te.set("network_interface_name", h.NetworkInterface)
	te.set("num_cpus", num(h.NumCPUs))
	te.set("num_gpus", num(h.NumGPUs))
	te.set("num_neurons", num(h.NumNeurons))
	te.set("output_data_dir", outputDataDir)
	te.set("output_dir", outputDir)
	te.set("output_intermediate_dir", intermediateDir)
	te.set("resource_config", rc)
	te.set("topology", pyList{})
	te.set("user_entry_point", program)

	var vars []smVar
	add := func(key string, v pyValue, aggregate bool) {
		vars = append(vars, smVar{Var{"SM_" + pyUpper(key), smFormat(v)}, aggregate})
	}
	add("hosts", hosts, false)
	add("network_interface_name", h.NetworkInterface, false)
	add("hps", user, true)
	add("user_entry_point", program, false)
	add("framework_params", afp, true)
	add("resource_config", rc, false)
	add("input_data_config", idc, false)
	add("output_data_dir", outputDataDir, false)
	add("channels", sortedNames, false)
	add("current_host", h.Name, false)
	add("current_instance_type", smInstanceType, false)
	add("current_instance_group", smInstanceGroup, false)
	add("current_instance_group_hosts", pyList{h.Name}, false)
	add("instance_groups", pyList{smInstanceGroup}, false)
	add("instance_groups_dict", groupsDict, false)
	add("distribution_instance_groups", distGroups, false)
	add("is_hetero", false, false)
	add("module_name", moduleName, false)
	add("log_level", logLevel, false)
	add("framework_module", nil, false)
	add("input_dir", inputDir, false)
	add("input_config_dir", p.ConfigDir(), false)
	add("output_dir", outputDir, false)
	add("num_cpus", num(h.NumCPUs), false)
	add("num_gpus", num(h.NumGPUs), false)
	add("num_neurons", num(h.NumNeurons), false)
	add("model_dir", modelDir, false)
	add("module_dir", moduleDir, false)
	add("training_env", te, true)
	add("user_args", smUserArgs(user), true)
	add("output_intermediate_dir", intermediateDir, false)
	for _, c := range p.Inputs {
		add("channel_"+c.Name, p.InputDir(c), false)
	}
	for _, k := range user.keys {
		add("hp_"+k, user.vals[k], true)
	}
	return append([]smVar{{Var{"TRAINING_JOB_NAME", p.Name}, false}}, vars...)
}

// smFormat is to_env_vars' format_value: a string as is, None empty,
// anything else compact sorted ASCII JSON.
func smFormat(v pyValue) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	}
	return pyDumps(v)
}

// smUserArgs is mapping.to_cmd_args: names sorted, "--name" (or "-n" for
// a one-character name), the value as str(), a dict value as
// "k=v,k2=v2" with its keys sorted.
func smUserArgs(hps *pyDict) pyList {
	args := pyList{}
	for _, k := range sortStrings(hps.keys) {
		switch {
		case k == "":
			args = append(args, "")
		case len([]rune(k)) > 1:
			args = append(args, "--"+k)
		default:
			args = append(args, "-"+k)
		}
		v := hps.vals[k]
		switch v := v.(type) {
		case *pyDict:
			items := make([]string, 0, len(v.keys))
			for _, mk := range sortStrings(v.keys) {
				items = append(items, mk+"="+pyStr(v.vals[mk]))
			}
			args = append(args, strings.Join(items, ","))
		case nil:
			args = append(args, "") // _decode(None)
		default:
			args = append(args, pyStr(v))
		}
	}
	return args
}

// pyIn is Python's `x in groups` for sagemaker_distribution_instance_groups,
// which checkSageMaker requires to be a list.
func pyIn(x string, groups pyValue) bool {
	l, _ := groups.(pyList)
	for _, it := range l {
		if s, ok := it.(string); ok && s == x {
			return true
		}
	}
	return false
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out) // UTF-8 byte order is code point order, as Python's sorted
	return out
}

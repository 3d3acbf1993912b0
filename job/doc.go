// Package job turns a job spec into a validated Plan and prepares what
// training code written for Alibaba PAI expects (the shared spec
// JOB-ENVIRONMENT.md): the layout under the root (default /ml),
// input/config/hyperparameters.json and the PAI_* environment. Runner runs
// the job's command with its channels mounted through a Mounter the caller
// supplies, so this package knows nothing of FUSE.
//
// # Job spec
//
// YAML, or JSON (read with encoding/json so that every JSON document is
// accepted and numbers keep their text). Keys:
//
//	name             PAI_JOB_NAME (required)
//	command          a string, run with `sh -c`, or an argv list
//	code             URI copied into <root>/usercode before the command runs
//	hyperparameters  ordered map; values keep their text as written
//	inputs           channel -> URI (ending in '/': a directory; else one object)
//	outputs          channel -> directory URI
//	output_path      base URI of the default output channels
//	root             layout root (absolute; default /ml)
//	compat           "sagemaker" to set the SM_* variables as well ("none": off)
//
// Every problem is reported at once, each with its line and field.
//
// # Decisions beyond JOB-ENVIRONMENT.md
//
//   - ${SPEC_DIR} in a URI stands for the spec file's absolute directory,
//     so an example can ship its data next to its spec.
//   - The default output channels (model, checkpoints, logs, tensorboard)
//     always exist. With output_path each is mounted from
//     <output_path><channel>/; without it, it is a plain directory under
//     <root>/output, kept after the run. A declared output channel of the
//     same variable name replaces the default one.
//   - An input and an output channel may not share a name; two channels of
//     one kind, or two hyperparameters, whose variable names collide after
//     sanitising are an error naming both.
//   - A list or map hyperparameter becomes the compact JSON of its decoded
//     value, in the spec's key order.
//   - hyperparameters.json and PAI_HPS are written like Python's json.dumps
//     (", " and ": " separators, as in the spec's example) but without
//     escaping HTML characters or non-ASCII text.
//   - A value that cannot fit in one environment variable (128 KiB) or
//     holds a NUL byte is a validation error; an aggregate variable
//     (PAI_HPS, PAI_USER_ARGS, SM_HPS, SM_USER_ARGS, SM_TRAINING_ENV, ...)
//     that would not fit is left out with a warning.
//   - With compat sagemaker, mlfsd writes resourceconfig.json and
//     inputdataconfig.json too and sets TRAINING_JOB_NAME and exactly the
//     variables sagemaker-training-toolkit's Environment().to_env_vars()
//     derives from those files (sagemaker.go; test vectors from the
//     toolkit's own code under testdata/sagemaker). The differences, all
//     deliberate: SM_MODEL_DIR is <root>/output/model and SM_MODULE_DIR
//     <root>/usercode (the PAI layout); SM_OUTPUT_DATA_DIR is a fifth
//     default output channel, "data", without a host suffix, as in the
//     toolkit's code; host facts come from DetectHost; what the toolkit
//     reads from its own process environment is taken as unset. SM_CHANNEL_<CH>
//     is the channel's directory even for a single-object channel.
//   - In an argv-list command, an element that is exactly $PAI_USER_ARGS
//     (or ${PAI_USER_ARGS}) becomes the hyperparameters as separate
//     arguments: the lossless form of `train $PAI_USER_ARGS`.
//   - Env order: PAI_JOB_NAME, PAI_CONFIG_DIR, PAI_WORKING_DIR, PAI_HPS,
//     PAI_USER_ARGS, PAI_HPS_*, PAI_INPUT_*, PAI_OUTPUT_*, then
//     TRAINING_JOB_NAME and SM_* in the toolkit's order.
//   - The environment formats are described at FormatShell, FormatDotenv
//     and FormatJSON.
package job

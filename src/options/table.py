"""The options of the five commands, defined once: one row per option.

src/options/generate.py makes from these rows the C++ table (OptionTable and FillRequest,
include/tfckpt/options.h), from which the command line builds its parser, --help and
completions; the OPTIONS sections of the man pages (man/tfckpt-COMMAND.1.in has the
@OPTIONS@ line); and the Python package's keywords, docstrings and stubs
(python/tfckpt/_options.py, __init__.pyi). Adding an option is one row here and, when it
fills a request, the request's member in include/tfckpt/commands.h.

A row's field may be one value for every command it is in, or a dict by command ("*":
the others):

  name        "--jobs"; a positional argument's value name ("CKPT")
  commands    the commands that take it, in the order of COMMANDS
  short       "-j"
  kind        flag, int (range (LO, HI); 'inf' for no bound), number, text, path, choice
              (one of `words`), optional-choice (one of `words`; the bare option means
              `default`), duration (90s, 30m, 2h, 7d, 0; seconds from Python)
  value       the value's name in --help and the man page ("N"; an optional choice's is
              its words, "check|first")
  repeatable  given once per value (--include A --include B)
  required, positional
  words       the C++ function giving the words a value begins with, from the parser that
              reads it ("PolicyWords"): completion offers them; a choice's values
              ("ServerSideWords"), which the table never spells out: the C++ table points at
              the function, and the man pages and stubs get them from the build's
              option_words.json (generate.py --words)
  completion  path, free, words or none, when not what the kind implies
  help        the sentence --help shows; the man page's entry begins with it
  doc         what the man page says after it (roff)
  member      the request member it fills ("strict"), or "run.MEMBER" of RunOptions; none
              for what the front end itself does (--json, --quiet)
  group       --help's heading, for options apart from the command's main ones
  needs, excludes   options it needs, or cannot be given with
  python      False: not a keyword of the Python function (--json: the functions return
              the document; --quiet: they print nothing)
  keyword     the Python keyword, when not the long name with '-' as '_'
  pypositional  the Python function takes it by position too (output)
  pykind      the kind Python checks, when not the row's (renames: Python's \\1 and \\g<1> too)
  pytype      the stub's type, when not the kind's
"""

# The commands, with the first line of their Python docstrings.
COMMANDS = {
    "inspect": "`tfckpt inspect CKPT --json`: the listing, the values of tensors, statistics or the object graph.",
    "validate": "`tfckpt validate CKPT --json`: every check, or with against=OLD logical equality; raises "
                "CheckFailedError (with .report) when a check fails.",
    "reshard": "`tfckpt reshard CKPT -o OUTPUT --json`: re-slice partitioned variables and re-split data files.",
    "merge": "`tfckpt merge CKPT... -o OUTPUT --json`: merge bundles as MergeV2Checkpoints does, finish unmerged "
             "saves, edit.",
    "convert": "`tfckpt convert SRC -o OUTPUT --json`: to and from safetensors, to NumPy .npz, V1 to V2, casts.",
}


class Option:
    def __init__(self, name, commands, *, kind, short="", value="", repeatable=False, required=False,
                 positional=False, range=None, default="", words=None, completion=None, help,
                 doc=None, member=None, group="", needs=None, excludes=None, python=True, keyword=None,
                 pypositional=False, pykind=None, pytype=None):
        unknown = [c for c in commands if c not in COMMANDS]
        assert not unknown, f"{name}: no command {unknown}"
        self.name, self.commands = name, tuple(commands)
        self.kind, self.short, self.value, self.repeatable = kind, short, value, repeatable
        self.required, self.positional, self.range = required, positional, range
        self.default, self.words, self.completion, self.help, self.doc = default, words, completion, help, doc
        self.member, self.group, self.needs, self.excludes = member, group, needs, excludes
        self.python, self.keyword, self.pypositional, self.pykind, self.pytype = (python, keyword, pypositional,
                                                                                  pykind, pytype)


COMMON = ("inspect", "validate", "reshard", "merge", "convert")

# --server-side: the same in the three commands that write, but for what each copies.
_SERVER_SIDE_HEAD = r"""Where the input and the output are objects of one \fBs3://\fR store (the same endpoint and
credentials; any buckets), the bytes that move unchanged are copied inside the store (S3's
UploadPartCopy with \fBx\-amz\-copy\-source\-range\fR, pinned to the input's ETag) instead of
"""
_SERVER_SIDE_TAIL = r"""assembled from parts of 5 MiB to 5 GiB (at most 10,000): ranges the store copies, and the bytes
around them (the index, headers, small tensors, pieces cut on other axes, casts) sent from here,
each with enough of its neighbouring copied range to make a part. The output is byte-identical
to a client-side run. Bytes the store copies are not read from the input. The verification
(unless \fB\-\-no\-verify\fR) reads them back once from the completed output objects before
the index is committed (a safetensors file: after its commit), takes the checksum of each piece
cut from a stored one from them, and proves the output by the input's stored CRC-32C
checksums: a run downloads the checkpoint about once. Without verification nothing copied is
read where the checksum is known (a tensor copied whole, or joined from whole stored pieces:
the input's index says it), and a piece cut from a stored one is read from the input for its
checksum; so a damaged input piece copied whole is not noticed (the output's index keeps the
input's checksum, which a later \fBtfckpt validate\fR checks; a safetensors file has none).
Each copy names the input's ETag (\fBx\-amz\-copy\-source\-if\-match\fR); where the
store refuses that for an object a HEAD shows unchanged (Swift, for an object uploaded in
parts), the part is copied without it. \fIMODE\fR:
\fBauto\fR (default) copies inside the store where it can, else through this machine; a store
that refuses the copy (HTTP 501 NotImplemented, or 403 AccessDenied) makes the run copy through
this machine from then on, with a note; \fBnever\fR always copies through this machine;
\fBalways\fR is a usage error (exit 2) when the run cannot copy inside the store (a local input
or output, another store, \fBgs://\fR), and a store that refuses is an error (exit 3, nothing
left). \fBgs://\fR is always copied through this machine: Cloud Storage's XML API has no copy
of a byte range into a part. The \fB\-\-json\fR report's \fB"transfer"\fR says how many bytes
were copied inside the store, uploaded and downloaded; the human output prints them in a line
\fBtransfer:\fR when an object store was involved."""

ROWS = [
Option(
    'CKPT', ('inspect', 'validate', 'reshard'),
    kind='path',
    value='CKPT',
    positional=True,
    help={
        'inspect': """Checkpoint: prefix, .index file, directory, V1 file, or s3:// / gs:// URL (man tfckpt: OBJECT STORES)""",
        'validate': """Checkpoint to check: prefix, .index file, directory, V1 file, or s3:// / gs:// URL (man tfckpt: OBJECT STORES)""",
        'reshard': 'Input checkpoint',
    },
    member='ckpt',
    required={
        'inspect': True,
        'validate': True,
        'reshard': False,
    },
),
Option(
    'SRC', ('convert',),
    kind='path',
    value='SRC',
    positional=True,
    help='TF V2 or V1 checkpoint, a .safetensors file or a *.safetensors.index.json set',
    member='src',
    required=True,
),
Option(
    'PREFIX', ('merge',),
    kind='path',
    value='PREFIX',
    positional=True,
    help='Input bundles, in order (with --recover: the checkpoint to finish)',
    keyword='ckpts',
    member='inputs',
    required=True,
    repeatable=True,
),
Option(
    '--output', ('reshard', 'merge', 'convert'),
    short='-o',
    kind='path',
    value={'reshard': 'OUT', 'merge': 'OUT', 'convert': 'DST'},
    help={
        'reshard': """Output prefix (OUT.index, OUT.data-*); OUT.index also names a TF prefix; not a directory; may be an s3:// or gs:// URL""",
        'merge': """Output prefix (with --recover: defaults to PREFIX); OUT.index also names a TF prefix; not a directory; may be an s3:// or gs:// URL""",
        'convert': """Output path: .safetensors, .npz or a TF prefix (missing directories are created); OUT.index also names a TF prefix; not a directory; may be an s3:// or gs:// URL""",
    },
    doc={
        'reshard': r"""Refused when it is the
input (by any spelling), or when a checkpoint exists there and \fB\-\-force\fR is not given. \fIOUT\fB.index\fR names the prefix \fIOUT\fR (as for an input); a
directory (\fIOUT\fB/\fR or an existing directory) is refused with exit 2: name the output inside it. It may be an \fBs3://\fR or \fBgs://\fR URL: data objects first, the index last (see OBJECT STORES in
.BR tfckpt (1)).
Missing parent directories are created (and removed again if the run fails).""",
        'merge': r"""\fIOUT\fB.index\fR names the prefix \fIOUT\fR (as for an input); a
directory (\fIOUT\fB/\fR or an existing directory) is refused with exit 2: name the output inside it. It may be an \fBs3://\fR or \fBgs://\fR URL: data objects first, the index last (see OBJECT STORES in
.BR tfckpt (1)).
Missing parent directories are created (and removed again if the run fails).
Across file systems data files are copied instead of linked (a full disk is reported as "no
space", nothing is left).""",
        'convert': r"""The output path (a prefix for TensorFlow output; \fIDST\fB.index\fR names the prefix
\fIDST\fR; a sharded safetensors set may be named by its \fINAME\fB.safetensors.index.json\fR).
A directory (\fIDST\fB/\fR or an existing directory) is refused with exit 2. \fIDST\fR may be an
\fBs3://\fR or \fBgs://\fR URL (see OBJECT STORES in
.BR tfckpt (1)).
Missing parent
directories are created for every format, and removed again if the run fails.""",
    },
    member='out',
    required={
        'reshard': False,
        'merge': False,
        'convert': True,
    },
    pypositional=True,
),
Option(
    '--filter', ('inspect',),
    kind='text',
    value='REGEX',
    help='Only tensors whose logical name matches this regular expression',
    doc="""RE2 syntax, searched anywhere in the name (anchor with ^ and $).""",
    member='filter',
),
Option(
    '--tensor', ('inspect',),
    kind='text',
    value='NAME',
    help='Print the values of this tensor (repeatable)',
    doc=r"""The values are laid out as numpy prints arrays: tensors of more
than 1000 elements are summarised, showing 3 elements at each edge of every axis with "..."
between. The text is numpy's \fBnp.array2string\fR of the array (default print options):
floats with up to 8 fraction digits, the shortest that identify the value (\fB1.\fR for an
integral value, float16 65504 is \fB65504.\fR), in scientific notation when the printed
values span more than 1000x, pass 1e8 or go below 1e-4; columns padded to a common width;
rows wrapped at 75 characters. bfloat16 prints as numpy prints its float32 value; float16
and float8 with the shortest digits of their own type. Partitioned tensors are read from
their slices. Strings are printed as b'...' with C escapes; every payload CRC is checked on
the way.""",
    member='tensors',
    excludes=('--tree',),
    repeatable=True,
),
Option(
    '--all-values', ('inspect',),
    kind='flag',
    help='With --tensor: print every element, never summarise',
    doc=None,
    member='all_values',
    needs=('--tensor',),
),
Option(
    '--stats', ('inspect',),
    kind='flag',
    help='Min, max, mean, std, NaN/Inf/zero counts per numeric tensor',
    doc=r"""For every numeric tensor (not strings, variants or complex): minimum, maximum, mean and
population standard deviation of the finite values, and the counts of NaN, infinite and zero
elements. Computed in one streaming pass over the stored bytes: chunks of 1 MiB read on
\fB\-j\fR threads (memory stays a buffer per thread whatever the checkpoint's size), their
sums merged in order, so the numbers do not depend on \fB\-j\fR; every CRC is checked.""",
    member='stats',
    excludes=('--tree',),
),
Option(
    '--tree', ('inspect',),
    kind='flag',
    help='Show the TF2 object graph as a tree (not with --stats or --tensor)',
    doc=r"""The graph is \fB_CHECKPOINTABLE_OBJECT_GRAPH\fR, drawn indented: child
objects by local name, each attribute with the dtype, shape and key of the tensor holding it,
and optimizer slot variables under the variable they belong to. A checkpoint without an object
graph (TF1) says so. Not with \fB\-\-stats\fR or \fB\-\-tensor\fR (a usage error).""",
    member='tree',
    excludes=('--tensor', '--stats'),
),
Option(
    '--index-only', ('inspect',),
    kind='flag',
    help='List from the index alone: do not fail when data files are missing or short',
    doc=None,
    member='index_only',
),
Option(
    '--against', ('validate',),
    kind='path',
    value='OLD',
    help="""Compare with this checkpoint instead: same tensors, dtypes, shapes and values, whatever the slicing""",
    doc=None,
    member='against',
),
Option(
    '--strict', ('validate', 'convert'),
    kind='flag',
    help={
        'validate': 'Treat warnings as errors (notes stay notes)',
        'convert': 'A tensor the output format cannot hold is an error, not a warning',
    },
    doc={
        'validate': None,
        'convert': None,
    },
    member='strict',
),
Option(
    '--quick', ('validate',),
    kind='flag',
    help='Metadata only: skip reading data and checking tensor checksums',
    doc=None,
    member='quick',
),
Option(
    '--abort-uploads', ('validate',),
    kind='flag',
    help="""First abort the uploads in progress under an s3:// or gs:// CKPT (left by killed writers; validate lists them), then validate, e.g. validate --abort-uploads s3://my-bucket/run/ckpt-100""",
    doc=r"""The multipart uploads in progress under \fICKPT\fR's prefix that were started at least
\fB\-\-older\-than\fR ago are aborted (what a writer killed
mid-upload leaves; the store keeps, and bills, their parts until then), one line on standard
error per upload, then validate as usual; younger ones are left to the writer that may still
be running them, and reported. A local \fICKPT\fR is a usage error (exit status 2): local
writes leave temporaries, not uploads. Example:
\fBtfckpt validate \-\-abort\-uploads s3://my\-bucket/run/ckpt\-100\fR.""",
    member='abort_uploads',
),
Option(
    '--older-than', ('validate',),
    kind='duration',
    value='DURATION',
    help="""With --abort-uploads: only uploads started at least this long ago (default 1h: a younger one may be a writer still running; 0: all)""",
    doc=r"""By the store's Initiated time: \fB90s\fR, \fB30m\fR, \fB2h\fR, \fB7d\fR; \fB0\fR aborts all.
From Python, seconds (an int) or the same text.""",
    member='older_than_seconds',
),
Option(
    '--tolerance', ('validate',),
    kind='number',
    value='ABS',
    help="""With --against: floats may differ by this much (absolute); tensors whose dtype changed between floating-point dtypes (a cast) are then compared by value, the change reported as a note""",
    doc=r"""NaN equals NaN. For checkpoints produced by a dtype cast: a tensor whose dtype changed from one floating-point
dtype to another is then compared by value (each element converted to double) and the change
is a note (\fBagainst.dtype\fR), which never fails the run, \fB\-\-strict\fR or not. Without
\fB\-\-tolerance\fR a dtype change is an error.
Example: \fBtfckpt convert model_f32 \-o model_bf16 \-\-cast float32=bfloat16; tfckpt validate
model_bf16 \-\-against model_f32 \-\-tolerance 0.01\fR""",
    member='tolerance',
),
Option(
    '--report', ('validate',),
    kind='flag',
    help="""With --against: one line (with --json, one "differences" entry) per differing tensor: how many elements differ, the largest |new - old| and where, the largest relative difference""",
    doc=r"""Beyond the tolerance, when given; the lines follow the findings,
.IP
.nf
differ  NAME: N of M elements; max |new - old| D at [I, J] (new X, old Y); max |new - old| / |old| R
.fi
.IP
or with \fB\-\-json\fR one entry each in \fB"differences"\fR (below). N counts the differing
elements; the largest absolute difference D is over them, with the element where it is (the
first in row-major order on a tie) and both values; R is the largest relative difference
(infinite where an old value is 0). A NaN against a number counts as an infinite difference.
Strings, variants and complex numbers have no D or R; their line names the first differing
element instead. The numbers are gathered while the values are compared: memory does not grow
with the tensors.
Example: \fBtfckpt validate finetuned/ckpt \-\-against base/ckpt \-\-report \-\-json > diff.json\fR""",
    member='report',
),
Option(
    '--partition', ('reshard', 'convert'),
    kind='text',
    value='[REGEX=]SPEC',
    help={
        'reshard': """[REGEX=]SPEC (repeatable, first match wins): fixed:N[@AXIS], min-size[:BYTES[,MAX_SHARDS]][@AXIS] (TF's defaults 262144,1), max-size:BYTES[,MAX_SHARDS][@AXIS] (MAX_SHARDS 0 = no limit), none, layout:SPECS@MESH (checked as DTensor checks layouts). Without REGEX: every tensor partitioned today""",
        'convert': "TF output: [REGEX=]SPEC rules of 'tfckpt reshard' (repeatable)",
    },
    doc={
        'reshard': """See PARTITION RULES. Without any, tensors keep their slicing.""",
        'convert': r"""The rules of \fBtfckpt-reshard\fR(1), for a source of whole tensors.""",
    },
    member='partitions',
    repeatable=True,
    words='PartitionSpecWords',
),
Option(
    '--policy', ('reshard',),
    kind='text',
    value='POLICY',
    help="""Which data file each piece goes to: by-task[:N] (default: a piece stored as it is keeps its data file modulo N, new pieces go to the files in turn, no file left empty), shards:N, single, max-shard-size:BYTES (K/M/G/T suffixes; per task, as TF), by-device (DTensor's per-device files), file:SHARDS.json (your own shards, checked by TF's validate_shards rules)""",
    doc=None,
    member='policy',
    words='PolicyWords',
    pytype='Union[str, _ShardingCallback]',
),
Option(
    '--allow-any-dtype', ('reshard',),
    kind='flag',
    help="""Also cut tensors TF cannot read back whole from slices (float16, uint16/32/64, string, ...: BundleReader::GetSliceValue assembles only float, double, int8-64, uint8, bool, complex, qint8/32, quint8, bfloat16, int4, uint4)""",
    doc=None,
    member='allow_any_dtype',
),
Option(
    '--bytes-per-string', ('reshard',),
    kind='int',
    value='N',
    help='Element size of strings for min-size/max-size (16)',
    doc=None,
    member='bytes_per_string',
    range=(1, 'inf'),
),
Option(
    '--plan', ('reshard',),
    kind='path',
    value='PLAN.json',
    help='Write only a plan to PLAN.json: one task per output data file',
    member='plan_out',
    group='Scale-out (docs/SCALE_OUT.md)',
    excludes=('--dry-run',),
),
Option(
    '--execute', ('reshard',),
    kind='path',
    value='PLAN.json',
    help='Run one task of PLAN.json (with --task)',
    member='execute',
    group='Scale-out (docs/SCALE_OUT.md)',
),
Option(
    '--task', ('reshard',),
    kind='text',
    value='TASK',
    help='Task number, or auto: SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, then TASK_INDEX',
    member='task',
    group='Scale-out (docs/SCALE_OUT.md)',
    pytype='Union[int, str]',
),
Option(
    '--finalize', ('reshard',),
    kind='path',
    value='PLAN.json',
    help='Check every task of PLAN.json finished, merge their parts into OUT, verify, clean up',
    member='finalize',
    group='Scale-out (docs/SCALE_OUT.md)',
),
Option(
    '--recover', ('merge',),
    kind='flag',
    help="""Find the parts of an interrupted or unmerged save of PREFIX (PREFIX_temp/part-*, PREFIX_temp_<hex>/part-*, PREFIX.part-*, DTensor's PREFIX_dev-D-of-N and PREFIX_device_D_save_op_K) and merge them""",
    doc=r"""The parts are \fIPREFIX\fB_temp/part-NNNNN-of-MMMMM\fR (TF2), \fIPREFIX\fB_temp/part-NNNNN-of-MMMMM_dev-D-of-N\fR
(TensorFlow 2.21's DTensor save: merged device by device, each device's parts in part order;
device 0 must have every part), \fIPREFIX\fB_temp_\fIHEX\fB/part-...\fR (TF1),
\fIPREFIX\fB.part-...\fR (object stores), \fIPREFIX\fB_dev-D-of-N\fR (older DTensor:
DeviceSuffix pads the device to the width of the count, \fB_dev-0-of-4\fR, \fB_dev-02-of-16\fR), or
\fIPREFIX\fB_device_\fID\fB_save_op_\fIK\fR (DTensor's BuildPerDeviceSave: device \fID\fR's
\fIK\fR-th save op), list them, and merge them into \fIPREFIX\fR (or \fB\-o\fR). DTensor's parts
are merged in DTensor's order (by device, then save op); device 0 (which always saves) and
each device's save ops from 0 up must all be there, as DTensor numbers them. Other devices
may have no \fB_dev-\fR part: a device holding no slice it is the lowest device of saves
nothing, and DTensorShardedPrefix lists no part for it. A missing part is
named and refused; several sets of parts are refused; \fB*.tempstate*\fR debris is ignored.
With \fB\-\-move\fR the parts are removed afterwards, whatever their form.
.IP
For example, a DTensor save of \fBckpt-5\fR on a mesh of 4 devices that stopped before its
MergeV2 leaves \fBckpt-5_device_0_save_op_0\fR, \fBckpt-5_device_1_save_op_0\fR, ...;
\fBtfckpt merge \-\-recover ckpt-5 \-\-move\fR finishes it as DTensor would have.""",
    member='recover',
),
Option(
    '--allow-missing', ('merge',),
    kind='flag',
    help='Skip inputs without an index (at least one must exist)',
    doc=None,
    member='allow_missing',
),
Option(
    '--move', ('merge',),
    kind='flag',
    help="""TensorFlow's behaviour: rename the data files, delete input indexes and emptied input directories""",
    doc=r"""The data files are renamed instead of linked; only input directories that differ from the
output's are removed. Once the output
index is written the inputs are consumed: an interrupt or a failed verification (CRCs and layout
alone, as the inputs are gone) after that keeps the output. Where an input or the output is an
object URL (an object store has no rename), the data files are copied instead (inside the store
where it can: \fB\-\-server\-side\fR), the output is verified against the inputs and committed
as without \fB\-\-move\fR, and only then are the inputs' indexes and then their data objects
deleted: until the output's index is committed the inputs are whole, and a failure or an
interrupt leaves them so, with nothing of the output; after it, the deletions finish (one
that fails is a note, the output stays).""",
    member='move',
),
Option(
    '--on-conflict', ('merge',),
    kind='choice',
    value='RULE',
    words='ConflictWords',
    help='The same tensor in several inputs: error (default), first, last',
    doc=r"""The same tensor is the same name after renames; the error names both inputs.
Example: \fBtfckpt merge base/ckpt tuned/ckpt \-o mixed/ckpt \-\-on\-conflict last\fR""",
    member='on_conflict',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
),
Option(
    '--include', ('merge', 'convert'),
    kind='text',
    value='REGEX',
    help="""Keep only tensors whose name contains a match of REGEX (RE2 syntax; repeatable, any may match)""",
    doc={
        'merge': "Example: \\fBtfckpt merge big/ckpt \\-o enc/ckpt \\-\\-include '^encoder/'\\fR",
        'convert': None,
    },
    member='include',
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
    repeatable=True,
),
Option(
    '--exclude', ('merge', 'convert'),
    kind='text',
    value='REGEX',
    help='Drop tensors whose name contains a match of REGEX (repeatable)',
    doc={
        'merge': "Example: \\fBtfckpt merge a/ckpt \\-o b/ckpt \\-\\-exclude '^global_step$'\\fR",
        'convert': None,
    },
    member='exclude',
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
    repeatable=True,
),
Option(
    '--rename', ('merge', 'convert'),
    kind='text',
    value='REGEX=REPLACEMENT',
    help=r"""REGEX=REPLACEMENT on tensor names, every match replaced ($1..$9 groups, $& the match, $$ a dollar; '=' in REGEX written '\='); repeatable, applied in order""",
    doc={
        'merge': r"""Two
tensors that end up with one name are an error (exit 2).
Example: \fBtfckpt merge old/ckpt \-o new/ckpt \-\-rename '^bert/=encoder/' \-\-rename '/(\\d+)$=_$1'\fR""",
        'convert': r"""Two
tensors that end up with one name are an error (exit 2).
Example: \fBtfckpt convert bert/ckpt \-o bert.safetensors \-\-rename '^bert/=' \-\-exclude 'adam_[mv]$'\fR""",
    },
    member='renames',
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
    repeatable=True,
    pykind='renames',
),
Option(
    '--drop-optimizer', ('merge',),
    kind='flag',
    help="""Remove optimizer state (TF2 .OPTIMIZER_SLOT and optimizer/*, TF1 Adam/Momentum/Ftrl/... slots, beta1_power, training/<Optimizer>/*)""",
    doc=r"""What is removed: TF2 slot variables (\fB/.OPTIMIZER_SLOT/\fR), the optimizer's own objects
(\fBoptimizer/iter\fR, \fBoptimizer/learning_rate\fR, ..., and anything under an optimizer node of
the object graph, a model's \fBmodel/optimizer/\fR too; the newer Keras optimizers'
\fB.../optimizer/_variables/\fIN\fB/...\fR, \fB_iterations\fR and \fB_learning_rate\fR, but not Keras 3's
\fB.../optimizer/_trainable_variables/\fIN\fR, which are the model's own weights), TF1 slots named after their optimizer (\fB.../Adam\fR, \fB.../Adam_1\fR,
\fB.../Momentum\fR, \fB.../Adagrad\fR, \fB.../Ftrl\fR, \fB.../Ftrl_1\fR, \fB.../RMSProp\fR,
\fB.../RMSProp_1\fR, \fB.../Adadelta\fR, BERT's \fB.../adam_m\fR and \fB.../adam_v\fR, any further
\fB_N\fR), \fBbeta1_power\fR, \fBbeta2_power\fR, and Keras-in-Estimator
\fBtraining/\fIOptimizer\fB/...\fR. Prints how many tensors and bytes were dropped.
Example: \fBtfckpt merge bert/model.ckpt-100000 \-o serve/model \-\-drop\-optimizer\fR""",
    member='drop_optimizer',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
),
Option(
    '--average', ('merge',),
    kind='flag',
    help='Element-wise mean of float tensors over all inputs (two or more); others from the last',
    doc=r"""Needs at least two inputs (one is a usage error). Element-wise mean over all inputs of float tensors (float16, bfloat16, float32, float64) present in
every input with the same dtype, shape and slicing; sums are kept in double precision and rounded
to nearest even once. Other tensors come from the last input that has them (a note says why a
float tensor was not averaged). Streaming: memory does not grow with the tensors.
Example: \fBtfckpt merge run/ckpt-8 run/ckpt-9 run/ckpt-10 \-o avg/ckpt \-\-average\fR""",
    member='average',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
),
Option(
    '--collapse-parallel', ('merge',),
    kind='optional-choice',
    words='CollapseParallelWords',
    help="""Keep component 0 (X/.ATTRIBUTES/VARIABLE_VALUE) of parallel-device variables and drop parallel_component_1..N-1, TF's names (others are left, with a note); check (default) verifies the values are equal, whatever the slicing""",
    doc=r"""TensorFlow's
ParallelVariable (tensorflow/python/distribute/parallel_device/saving.py) names the attribute of
component 0 "VARIABLE_VALUE" ("the name regular tf.Variables use to save") and that of component
K "parallel_component_{K}" for K = 1 ... N\-1, so an N-device variable X is saved as
\fBX/.ATTRIBUTES/VARIABLE_VALUE\fR, \fBX/.ATTRIBUTES/parallel_component_1\fR, ...,
\fBX/.ATTRIBUTES/parallel_component_\fIN\-1\fR. Only these names are collapsed: a
\fBparallel_component_0\fR or a zero-padded number (\fBparallel_component_01\fR), and the
components of an X that has no \fBVARIABLE_VALUE\fR (among the tensors the filters keep) or
misses a number (a \fB_2\fR without a
\fB_1\fR), are left as they are, each with a note. With \fBcheck\fR (the default) every
component must first equal component 0: the values are compared element by element whatever
either is stored as (whole, or sliced in any way), with the comparison of \fBtfckpt validate
\-\-against\fR (bitwise); the first differing element is reported with both values (component,
then component 0) and how many differ, and nothing is written (exit 1). Write the value with '='
when a checkpoint follows.
Example: \fBtfckpt merge pd/ckpt-1 \-o single/ckpt-1 \-\-collapse\-parallel\fR""",
    member='collapse_parallel',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
    default='check',
),
Option(
    '--expand-parallel', ('merge',),
    kind='int',
    value='N',
    help="""Copy each VARIABLE_VALUE but save_counter's into parallel_component_1..N-1 (restore on an N-device parallel device; N >= 2)""",
    doc=r"""The reverse: every \fB.../.ATTRIBUTES/VARIABLE_VALUE\fR tensor is copied into
\fBparallel_component_1\fR ... \fBparallel_component_\fIN\-1\fR, so a single-device checkpoint
restores on an N-device parallel device. Except \fBsave_counter/.ATTRIBUTES/VARIABLE_VALUE\fR:
tf.train.Checkpoint creates its save counter on the CPU, never on the parallel device, so it has
no components. N must be at least 2: 0, 1 or a negative N is a usage
error (exit 2).
Example: \fBtfckpt merge single/ckpt-1 \-o pd/ckpt-1 \-\-expand\-parallel 4\fR""",
    member='expand_parallel',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
    range=(-(1 << 31), (1 << 31) - 1),
),
Option(
    '--collapse-replicas', ('merge',),
    kind='flag',
    help="""TPU replicas NAME/0..NAME/K-1 become NAME, after checking their values are equal (a lone NAME/0, as TF1's Saver writes it, too; slots NAME/0/SLOT become NAME/SLOT)""",
    doc=r"""The replicas must be consecutive from 0, of one dtype and shape, with no tensor \fBNAME\fR
already; they are compared whatever their slicing (and reported as for
\fB\-\-collapse\-parallel\fR). A lone \fBNAME/0\fR is what TensorFlow's default TF1 Saver writes
for a ReplicatedVariable (it saves replica 0's variable, under that variable's name): it becomes
\fBNAME\fR, with a note. Optimizer slots, which TF1 scopes under replica 0's name, follow:
\fBNAME/0/SLOT\fR and \fBNAME/0/SLOT/0\fR become \fBNAME/SLOT\fR. Groups that do not qualify are
left alone with a note.
Example: \fBtfckpt merge tpu/model \-o cpu/model \-\-collapse\-replicas\fR""",
    member='collapse_replicas',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
),
Option(
    '--no-check', ('merge',),
    kind='flag',
    help='With --collapse-replicas (required): do not compare the replicas',
    doc=r"""With \fB\-\-collapse\-replicas\fR (a usage error without it): keep replica 0 without comparing.""",
    member='no_check',
    group='Combining (rewrites the data; inputs may be any checkpoint, V1 included)',
    needs=('--collapse-replicas',),
),
Option(
    '--to', ('convert',),
    kind='choice',
    value='FORMAT',
    words='ConvertFormatWords',
    help="""Output format, whatever the name of -o (default: from its extension, else tf); an extension that says another format is a usage error""",
    doc=r"""Without it, the extension of \fIDST\fR decides (\fB.safetensors\fR,
\fB.npz\fR, else TensorFlow). With it, \fB\-\-to\fR decides whatever the name
(\fB\-o weights.st \-\-to safetensors\fR writes and verifies safetensors), but a name whose
extension says another format (\fB\-o y.safetensors \-\-to npz\fR) is a usage error (exit 2).""",
    member='to',
),
Option(
    '--cast', ('convert',),
    kind='text',
    value='FROM=TO',
    help="""FROM=TO on every tensor of dtype FROM: float32=bfloat16, float32=float16, float32=float64, bfloat16=float32, float16=float32, float64=float32 (repeatable)""",
    doc=r"""Casts apply after the filters: \fBfloat32=bfloat16\fR and
\fBfloat32=float16\fR round to nearest, ties to even (NaN stays NaN with its sign, Inf stays
Inf, float16 overflow gives Inf, subnormals are rounded correctly); \fBbfloat16=float32\fR,
\fBfloat16=float32\fR, \fBfloat32=float64\fR are exact; \fBfloat64=float32\fR rounds to nearest
even. Other pairs are refused (exit 2). Repeatable.""",
    member='casts',
    repeatable=True,
    words='CastWords',
    pytype='_Cast',
),
Option(
    '--max-file-size', ('convert',),
    kind='text',
    value='BYTES',
    help="""safetensors: split into NAME-0000i-of-0000K.safetensors files of at most BYTES (K/M/G suffixes) plus NAME.safetensors.index.json""",
    doc=r"""Tensors are packed in name order into files of at most BYTES of data (suffixes K, M, G,
T are powers of 1024; a larger tensor gets a file of its own), named
\fISTEM\fB-00001-of-0000\fIK\fB.safetensors\fR, plus \fISTEM\fB.safetensors.index.json\fR with
\fBmetadata.total_size\fR and \fBweight_map\fR (Hugging Face's layout). When everything fits,
\fIDST\fR is one file. A split write reports the index and the files it names ("wrote
\fISTEM\fB.safetensors.index.json\fR (safetensors index of 2 files: ...)"), not \fIDST\fR,
which does not exist then.""",
    member='max_file_size',
    pytype='Union[int, str]',
),
Option(
    '--dry-run', ('reshard', 'merge'),
    kind='flag',
    help={
        'reshard': 'Print the plan and write nothing (not with --plan)',
        'merge': 'Print the plan and write nothing (each output tensor and its source; with --json as JSON)',
    },
    doc={
        'reshard': r"""The plan lists per tensor its old slices and new slices with their files, per
output file its bytes. Not with \fB\-\-plan\fR (a usage error: \fB\-\-plan\fR writes a file).""",
        'merge': r"""The plan lists each output tensor with its dtype (after a cast), shape, data
file, size and where it comes from (an input and its name there, "mean of N inputs", a replica or
a copy of component 0), then what the rules dropped, collapsed, averaged and added (with
\fB\-\-json\fR the JSON document of a real run, \fB"dry_run": true\fR). Conflicts and the checks
of \fB\-\-collapse\-parallel\fR and \fB\-\-collapse\-replicas\fR are made as for a real run.
Example: \fBtfckpt merge old/ckpt \-o new/ckpt \-\-rename '^a/=b/' \-\-dry\-run \-\-json\fR""",
    },
    member='dry_run',
    excludes={'reshard': ('--plan',)},
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
),
Option(
    '--force', ('reshard', 'merge', 'convert'),
    kind='flag',
    help='Replace an existing output (an output that is one of the inputs is always refused)',
    doc={
        'reshard': """The old checkpoint's data files the new one does not use are removed.""",
        'merge': r"""Without
\fB\-\-move\fR, the old checkpoint's index goes first (no reader pairs it with new data files),
and its data files the new one does not use are removed. With \fB\-\-recover \-\-move\fR after a plain \fB\-\-recover\fR (the output's data files are
already links to the parts'), the parts' names are removed, so no orphaned data file stays in
\fIPREFIX\fB_temp\fR.""",
    },
    member='force',
),
Option(
    '--no-verify', ('reshard', 'merge', 'convert'),
    kind='flag',
    help={
        'reshard': """Do not verify the output (compared with the input; input checksums are then not checked either)""",
        'merge': 'Do not verify the output (read back and compared with the inputs: CRCs, layout, values)',
        'convert': 'Do not verify the output (every format: read back and compared with the input)',
    },
    doc={
        'reshard': r"""By default the written files are read back and compared with the
input before anything is renamed into place (while the disk still writes them back): an output
that fails is not written (exit 1, "nothing was written"), and with \fB\-\-force\fR the checkpoint
it would have replaced stays as it was. Input checksums are then not checked either.""",
        'merge': None,
        'convert': r"""The JSON then says
\fB"verified": false\fR.""",
    },
    member='no_verify',
),
Option(
    '--server-side', ('reshard', 'merge', 'convert'),
    kind='choice',
    value='MODE',
    words='ServerSideWords',
    help="""Bytes that move unchanged between objects of one s3:// store (same endpoint and credentials) are copied inside it (UploadPartCopy), not through this machine: auto (default; client-side where it cannot, or when the store refuses: a note), never, always (an error when it cannot). gs:// is always client-side""",
    doc={c: _SERVER_SIDE_HEAD + what + _SERVER_SIDE_TAIL for c, what in {
        'reshard': r"""through this machine: cuts on axis 0, unpartitioning on axis 0 and tensors moved between data files by a policy (pieces cut on other axes are gathered here). Each output object is
""",
        'merge': r"""through this machine: a plain merge (\fB\-\-recover\fR too) copies whole data files, a merge with edits the tensors it keeps uncast; \fB\-\-move\fR copies the data files and deletes the inputs afterwards. Each output object is
""",
        'convert': r"""through this machine: to TensorFlow and to safetensors (one file or a \fB\-\-max\-file\-size\fR set: the tensors kept uncast; the header goes up from here). Conversion to .npz sends every byte from here (\fBalways\fR is then a usage error). Each output object is
""",
    }.items()},
    member='server_side',
),
Option(
    '--json', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='flag',
    help={
        'inspect': """One JSON document on stdout (man tfckpt-inspect), also on failure: {"ok": false, "error": {...}}; --tensor values as JSON arrays""",
        'validate': """One JSON document on stdout (man tfckpt-validate), also on failure: {"ok": false, "error": {...}}""",
        'reshard': """One JSON document on stdout (man tfckpt-reshard), also on failure: {"ok": false, "error": {...}}; the plan, then the result""",
        'merge': """One JSON document on stdout (man tfckpt-merge), also on failure: {"ok": false, "error": {...}}; one schema for every mode""",
        'convert': """One JSON document on stdout (man tfckpt-convert), also on failure: {"ok": false, "error": {...}}""",
    },
    doc={
        'inspect': None,
        'validate': None,
        'reshard': r"""The plan (and after writing, the result with \fB"verified"\fR):
\fB{"ok": true, "input", "output", "num_files", "policy", "tensors": [{"name", "dtype", "shape",
"resliced", "old": [{"spec", "shape", "shard"}], "new": [{"spec", "shape", "file", "bytes", "task"}],
"source", "rule", "note"}], "files": [{"file", "path", "bytes", "pieces"}], "notes"}\fR ("source": the
input tensor of a renamed TF1 slot; "task", with \fB\-\-policy by\-task\fR only: the task the piece is
placed on, as TF's round-robin device setter places it, which is the task of its device a sharding
callback sees). Every \fB"spec"\fR is the
slice string as it is (or will be) stored in the index. With \fB\-\-plan\fR:
\fB{"ok": true, "plan", "num_tasks", "bytes", "notes"}\fR; \fB\-\-execute\fR: \fB{"ok": true, "task",
"num_tasks", "part", "entries", "bytes"}\fR; \fB\-\-finalize\fR: \fB{"ok": true, "output",
"num_tasks", "entries", "verified"}\fR. On failure: \fB{"ok": false, "error": {"id", "message",
"file", "key", "offset"}}\fR (see
.BR tfckpt (1));
an output that does not match its input has the id \fBoutput.mismatch\fR.""",
        'merge': None,
        'convert': r"""On success \fB{"ok": true, "output", "format", "files", "tensors", "bytes", "skipped", "notes",
"verified"}\fR; on failure \fB{"ok": false, "error": {"id", "message", "file", "key",
"offset"}}\fR (see
.BR tfckpt (1)).""",
    },
    python=False,
),
Option(
    '--jobs', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    short='-j',
    kind='int',
    value='N',
    help={
        'inspect': 'Threads reading values for --stats (default 0: one per core)',
        'validate': 'Threads for data checks (default 0: one per core)',
        'reshard': 'Threads copying tensors (default 0: one per core)',
        'merge': 'Output data files written in parallel (default 0: one per core)',
        'convert': 'Threads copying, the output the same whatever their number (default 0: one per core)',
    },
    doc={
        'inspect': None,
        'validate': """Data is read with
large sequential reads into a small per-thread buffer; memory does not grow with the checkpoint.""",
        'reshard': """Work is shared out by tensor (a
tensor cut on an axis other than 0 is read once and all its new pieces written together)
or by piece, largest first, preferring data files no other thread is writing; each data
file's layout is fixed beforehand, so the output does not depend on the thread count.""",
        'merge': None,
        'convert': r"""Every output's layout is fixed before a byte is written and its parts are written
in place, so its bytes do not depend on \fIN\fR.""",
    },
    member='run.jobs',
    range=(0, 1024),
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
),
Option(
    '--quiet', ('reshard', 'merge', 'convert'),
    short='-q',
    kind='flag',
    help={
        'reshard': """No progress bar (on a terminal it appears when the work takes more than a second; labelled 'copying', then 'verifying')""",
        'merge': """No progress bar (on a terminal it appears when the work takes more than a second; labelled 'copying', then 'verifying', the comparison with the inputs)""",
        'convert': """No progress bar (on a terminal it appears when the work takes more than a second; labelled 'writing', then 'verifying', the comparison with the input)""",
    },
    doc="The bar is on stderr: the phase, bytes done / total, rate, ETA.",
    python=False,
    group={'merge': 'Combining (rewrites the data; inputs may be any checkpoint, V1 included)'},
),
Option(
    '--connections', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='int',
    value='N',
    help="""Concurrent transfers of each s3:// or gs:// read (default 8, or TFCKPT_S3_CONNECTIONS), e.g. --connections 32 on a cloud VM""",
    doc=None,
    member='run.connections',
    range=(1, 256),
),
Option(
    '--endpoint-url', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='text',
    value='URL',
    help="""s3:// endpoint, http(s)://HOST[:PORT] (else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's, AWS itself)""",
    member='run.object_store.endpoint_url',
    group='Object stores (s3://, gs://; man tfckpt, OBJECT STORES)',
),
Option(
    '--profile', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='text',
    value='NAME',
    help="""AWS profile of ~/.aws/config and ~/.aws/credentials (else AWS_PROFILE); AWS_ACCESS_KEY_ID is then not used""",
    member='run.object_store.profile',
    group='Object stores (s3://, gs://; man tfckpt, OBJECT STORES)',
),
Option(
    '--region', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='text',
    value='REGION',
    help="AWS region (else AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)",
    member='run.object_store.region',
    group='Object stores (s3://, gs://; man tfckpt, OBJECT STORES)',
),
Option(
    '--no-sign-request', ('inspect', 'validate', 'reshard', 'merge', 'convert'),
    kind='flag',
    help='Send s3:// and gs:// requests unsigned (public buckets; also AWS_NO_SIGN_REQUEST=true)',
    doc=r"""How tfckpt finds the store and its credentials (the AWS CLI's order, Google's for
\fBgs://\fR): see OBJECT STORES in
.BR tfckpt (1).""",
    member='run.object_store.no_sign_request',
    group='Object stores (s3://, gs://; man tfckpt, OBJECT STORES)',
),
]

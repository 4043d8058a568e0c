# cs336report: every experiment of the CS336 Systems writeup, then the report.
#   snakemake --cores 1 report
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "workflow/config/default.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/benchmarking.smk"
include: "workflow/rules/report.smk"


# The default target: the rendered writeup (an included file cannot set the default).
rule all:
    default_target: True
    input:
        rules.report.output,

# check_student: the probes of the student's checkout and of a user's model, which import and run
# their code (cs336report/student/check.py), before any cell: a broken checkout stops the run here,
# with a message naming the config key and the adapter. Where the config names a checkout, every
# cell rule waits for this rule's output; where it names only a model, the rules whose cells run
# the model (student_check in common.smk). It starts before any other ready job.


rule check_student:
    input:
        code("student.check"),
    output:
        STUDENT_CHECK,
    log:
        "logs/check_student.log",
    priority: max(LONG_JOBS_FIRST.values()) + 1
    conda:
        CONDA_ENV
    params:
        check=settings_file(
            "check_student",
            "check",
            {
                "student": CFG.data.get("student"),
                "model_source": CFG.model_source,
                "device": CFG.device,
                "source": merged_source(CFG.files),
                "files": list(CFG.files),
            },
        ),
    shell:
        '"$CS336REPORT_PYTHON" -m cs336report check-student --check-json @{params.check} --out {output} > {log}'

# check_student: the probes of the student's checkout and of a user's model, which import and run
# their code (cs336report/student/check.py), before any cell: a broken checkout stops the run here,
# with a message naming the config key and the adapter. Where the config names a checkout or a
# model, every cell rule waits for this rule's output (student_check in common.smk).


rule check_student:
    input:
        code("student.check"),
    output:
        STUDENT_CHECK,
    log:
        "logs/check_student.log",
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

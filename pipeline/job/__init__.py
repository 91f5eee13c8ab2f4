"""One job, start to end: validate its config (:mod:`~pipeline.job.validate`), name it by what
determines its numbers (:mod:`~pipeline.job.identity`), run it — ingest, kernel blocks, fit,
certify, result file (:mod:`~pipeline.job.run`) — and say what it did
(:mod:`~pipeline.job.summary`)."""

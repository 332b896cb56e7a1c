# A RUN that fails: the CLI must exit non-zero and show the step's output.
FROM e2bdev/base
RUN echo step-output-before-failure && echo to-stderr >&2 && exit 7

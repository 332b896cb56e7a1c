# Built by `e2b template create` in cli_create_e2e_test.go. e2bdev/base is
# served by Warren's own base template (no registry).
FROM e2bdev/base
ENV GREETING=hello-cli SECOND=two
ENV THIRD three
ARG BUILD_ONLY=arg-value
WORKDIR /opt/app
COPY app /opt/app
COPY --chown=user:user note.txt /opt/
RUN chmod +x /opt/app/start.sh && echo "built-by-run $BUILD_ONLY as $(id -un) in $(pwd)" > /opt/app/run.txt
EXPOSE 8080

"""The shipped benchmarks, a module each: the module declares everything about its benchmark (official layout, files to
download with their checksums, scoring rule, report columns) and registers it with `@register`. `base.REGISTRY` imports
every module here on its first read, so a new benchmark is a new file."""

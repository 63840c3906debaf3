"""One attempt of a job on its worker: launching its process in the sandbox (launch, sandbox, shim, proc), its
environment (pyenv, buildenv), the pipe loop (pump), the attempt itself (runner) and its kinds (taskrun: a task of a
multi-worker job; sessionrun and terminal: an interactive session)."""

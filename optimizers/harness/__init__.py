"""The harness phase: Meta-Harness search over harness code, its archive, candidate validation, the
raced acceptance decision, and the proposers that write candidates."""

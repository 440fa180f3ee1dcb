"""Batched torch environments implementing rsl_rl's ``VecEnv`` interface."""

"""The transcript-keeping engine: the session that keeps a chat's transcript within the model's
window (folds, summaries, the fact keeper, heal, calibration, the tool loop). Its old name,
``engines.api``, keeps the import paths other code and checks rely on."""

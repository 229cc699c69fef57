"""The engine that runs any method's DAG: declaration, DVC bridge, Prefect runner, MLflow."""

"""The science: pure functions and torch modules. Never imports prefect, mlflow, dvc or ray."""

"""Plan + spec -> the SageMaker CreateTrainingJob request (`request.build_job_request`), its code
bundle, names, limits, default images, IAM policies, and the SageMaker SDK view (`sdk`)."""

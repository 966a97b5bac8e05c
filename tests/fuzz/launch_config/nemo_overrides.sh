nemo llm pretrain --factory llama3_8b trainer.num_nodes=1 trainer.devices=8 trainer.strategy.tensor_model_parallel_size=2 data.micro_batch_size=1 data.global_batch_size=128

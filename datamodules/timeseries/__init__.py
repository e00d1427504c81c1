"""Time series: table parsing and cleaning (``parse``), window arithmetic (``windows``), both
Lightning-free, and the forecasting LightningDataModule (``datamodule``)."""
